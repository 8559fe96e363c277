// The selftest report as one self-contained HTML page; what the page shows is in
// selftest_html.h. The report is read defensively (member() and friends never throw and
// treat a mistyped member as missing) because the page is also how people look at a report
// that failed validation.
#include "selftest_html.h"

#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace phasekv {
namespace tools {

namespace {

using nlohmann::json;

// Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
constexpr const char* kBlue = "#0072B2";      // accuracy per residue
constexpr const char* kVermillion = "#D55E00";  // flagged residues (plot marks)
constexpr const char* kGrey = "#7A7A7A";      // control run
constexpr const char* kInk = "#1D2330";
constexpr const char* kDash = "&#8212;";      // shown for a missing or non-finite value

// Above this P the plot is left out: it could not show one residue per pixel anyway.
constexpr long long kMaxPlotPeriod = 4096;

// ---- Reading the report ---------------------------------------------------------------

const json* member(const json* j, const char* key) {
  if (j == nullptr || !j->is_object()) return nullptr;
  auto it = j->find(key);
  return it == j->end() ? nullptr : &*it;
}

const json* element(const json* j, size_t i) {
  if (j == nullptr || !j->is_array() || i >= j->size()) return nullptr;
  return &(*j)[i];
}

size_t length(const json* j) { return j != nullptr && j->is_array() ? j->size() : 0; }

bool number(const json* j, double* out) {
  if (j == nullptr || !j->is_number()) return false;
  double v = j->get<double>();
  if (!std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool integer(const json* j, long long* out) {
  if (j == nullptr) return false;
  if (j->is_number_unsigned()) {
    uint64_t u = j->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<long long>(u);
    return true;
  }
  if (j->is_number_integer()) {
    *out = j->get<long long>();
    return true;
  }
  double d = 0;
  if (number(j, &d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
    *out = static_cast<long long>(d);
    return true;
  }
  return false;
}

bool boolean(const json* j, bool fallback = false) {
  return j != nullptr && j->is_boolean() ? j->get<bool>() : fallback;
}

const std::string& text(const json* j) {
  static const std::string empty;
  return j != nullptr && j->is_string() ? j->get_ref<const std::string&>() : empty;
}

std::vector<long long> integers(const json* j) {
  std::vector<long long> v;
  for (size_t i = 0; i < length(j); ++i) {
    long long x = 0;
    if (integer(element(j, i), &x)) v.push_back(x);
  }
  return v;
}

// ---- Formatting (format() and esc() are in svg.h) ---------------------------------------

std::string fixed(double v, int prec) {
  std::string s = format("%.*f", prec, v);
  if (s[0] == '-') s = "&#8722;" + s.substr(1);  // a real minus sign
  return s;
}

std::string fixed(const json* j, int prec) {
  double v = 0;
  return number(j, &v) ? fixed(v, prec) : kDash;
}

std::string count(long long v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string o;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) o += ',';
    o += digits[i];
  }
  return v < 0 ? "&#8722;" + o : o;
}

std::string count(const json* j) {
  long long v = 0;
  return integer(j, &v) ? count(v) : kDash;
}

// An integer without thousands separators (seeds, context lengths).
std::string plain(const json* j) {
  long long v = 0;
  return integer(j, &v) ? std::to_string(v) : kDash;
}

// p-values: three decimals down to 0.001, then a x 10^e with a real superscript.
std::string pvalue(const json* j) {
  double p = 0;
  if (!number(j, &p)) return kDash;
  if (p <= 0) return "0";
  if (p >= 0.001) return format("%.3f", p);
  int e = static_cast<int>(std::floor(std::log10(p)));
  double m = p / std::pow(10.0, e);
  if (m >= 9.95) {
    m /= 10;
    e += 1;
  }
  return format("%.1f&#8201;&#215;&#8201;10<sup>&#8722;%d</sup>", m, -e);
}

std::string interval(const json* ci, int prec) {
  double lo = 0, hi = 0;
  if (!number(element(ci, 0), &lo) || !number(element(ci, 1), &hi)) return kDash;
  return "[" + fixed(lo, prec) + ", " + fixed(hi, prec) + "]";
}

std::string residue_chips(const std::vector<long long>& rs) {
  if (rs.empty()) return "<span class=\"muted\">none</span>";
  std::string o;
  for (long long r : rs) o += format("<span class=\"chip weak\">%lld</span>", r);
  return o;
}

std::string pass_chip(bool pass) {
  return pass ? "<span class=\"chip pass\">PASS</span>" : "<span class=\"chip fail\">FAIL</span>";
}

std::string protocol_title(const std::string& name) {
  if (name == "outer") return "Outer padding";
  if (name == "in_sequence") return "In-sequence padding";
  return esc(name);
}

std::string protocol_blurb(const std::string& name) {
  if (name == "outer") return "Neutral padding before the whole prompt shifts every position.";
  if (name == "in_sequence") return "Neutral padding inside the prompt, ahead of the records, shifts the content.";
  return "";
}

// "outer" and "in_sequence" first, any other protocol after them in key order.
std::vector<std::pair<std::string, const json*>> protocols_of(const json* protocols) {
  std::vector<std::pair<std::string, const json*>> v;
  if (protocols == nullptr || !protocols->is_object()) return v;
  for (const char* known : {"outer", "in_sequence"}) {
    if (const json* p = member(protocols, known)) v.emplace_back(known, p);
  }
  for (auto it = protocols->begin(); it != protocols->end(); ++it) {
    if (it.key() != "outer" && it.key() != "in_sequence") v.emplace_back(it.key(), &it.value());
  }
  return v;
}

// ---- The per-residue curve --------------------------------------------------------------

struct Point {
  int r = 0;
  double acc = 0;
  double lo = 0, hi = 0;  // Wilson interval; lo == hi == acc when the report has none
  bool flagged = false;
};

struct Curve {
  std::vector<Point> points;  // ascending r, each r once, 0 <= r < P
  bool has_mean = false;
  double mean = 0;
  bool has_mean_ci = false;
  double mean_lo = 0, mean_hi = 0;
};

double clamp01(double v) { return std::min(1.0, std::max(0.0, v)); }

Curve read_curve(const json* protocol, long long period) {
  Curve c;
  const json* residues = member(protocol, "residues");
  std::vector<long long> flagged = integers(member(protocol, "flagged"));
  std::map<int, Point> by_r;
  for (size_t i = 0; i < length(residues); ++i) {
    const json* e = element(residues, i);
    long long r = static_cast<long long>(i);
    integer(member(e, "r"), &r);
    Point p;
    if (r < 0 || r >= period || !number(member(e, "accuracy"), &p.acc)) continue;
    p.r = static_cast<int>(r);
    p.acc = clamp01(p.acc);
    p.lo = p.hi = p.acc;
    const json* ci = member(e, "ci");
    double lo = 0, hi = 0;
    if (number(element(ci, 0), &lo) && number(element(ci, 1), &hi)) {
      p.lo = clamp01(std::min(lo, hi));
      p.hi = clamp01(std::max(lo, hi));
    }
    p.flagged = boolean(member(e, "flagged")) ||
                std::find(flagged.begin(), flagged.end(), r) != flagged.end();
    by_r[p.r] = p;
  }
  for (const auto& kv : by_r) c.points.push_back(kv.second);
  const json* summary = member(protocol, "summary");
  c.has_mean = number(member(summary, "mean_accuracy"), &c.mean);
  c.mean = clamp01(c.mean);
  const json* mci = member(summary, "mean_ci");
  c.has_mean_ci = number(element(mci, 0), &c.mean_lo) && number(element(mci, 1), &c.mean_hi);
  if (c.has_mean_ci) {
    double lo = clamp01(std::min(c.mean_lo, c.mean_hi)), hi = clamp01(std::max(c.mean_lo, c.mean_hi));
    c.mean_lo = lo;
    c.mean_hi = hi;
  }
  return c;
}

// ---- The plot -----------------------------------------------------------------------------

// Geometry of one plot, in SVG user units (1 unit = 1 CSS pixel at the natural width).
struct Frame {
  double width = 800, height = 420;
  double left = 64, right = 690, top = 64, bottom = 346;  // plot area
  double x_min = -0.5, x_max = 0;                          // residues; x_max = P + 0.5
  double x(double r) const { return left + (r - x_min) / (x_max - x_min) * (right - left); }
  double y(double acc) const { return bottom - acc * (bottom - top); }
  double step() const { return (right - left) / (x_max - x_min); }  // pixels per residue
};

// Error bar with caps from lo to hi at x.
std::string error_bar(const Frame& f, double x, double lo, double hi, double cap, const char* stroke,
                      double width) {
  std::string o = line(x, f.y(lo), x, f.y(hi), stroke, width);
  o += line(x - cap, f.y(lo), x + cap, f.y(lo), stroke, width);
  o += line(x - cap, f.y(hi), x + cap, f.y(hi), stroke, width);
  return o;
}

std::string polyline(const Frame& f, const std::vector<Point>& pts, double dx, const char* stroke,
                     double width, const char* extra) {
  if (pts.size() < 2) return "";
  std::string d;
  for (size_t i = 0; i < pts.size(); ++i) {
    d += format("%s%.1f,%.1f", i ? " " : "", f.x(pts[i].r + dx), f.y(pts[i].acc));
  }
  return format("<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%.2g\"%s/>", d.c_str(),
                stroke, width, extra);
}


// One SVG figure: accuracy against residue for one protocol, with the control overlaid.
std::string plot_svg(const std::string& id, const std::string& name, long long period, const Curve& main,
                     const Curve* control, const std::vector<long long>& strides) {
  Frame f;
  f.x_max = static_cast<double>(period) + 0.5;
  const double step = f.step();
  const bool overlay = control != nullptr && !control->points.empty();
  // Side by side when there is room, so the two error bars of one residue do not overlap.
  const double shift = overlay && step >= 16 ? std::min(0.14, 6.0 / step) : 0.0;
  const double radius = std::min(5.0, std::max(2.0, step * 0.16));
  const double cap = std::min(5.0, std::max(1.5, step * 0.12));

  std::string desc = "Retrieval accuracy by residue, " + protocol_title(name) + ":";
  for (const Point& p : main.points) {
    desc += format(" r=%d %.3f%s;", p.r, p.acc, p.flagged ? " (flagged weak)" : "");
  }
  if (main.has_mean) desc += format(" mean %.3f.", main.mean);
  if (overlay && control->has_mean) desc += format(" Control mean %.3f.", control->mean);

  std::string o;
  o += format("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" "
              "role=\"img\" aria-labelledby=\"%s-title %s-desc\" class=\"plot\" "
              "font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, "
              "'Liberation Sans', sans-serif\">",
              f.width, f.height, f.width, f.height, id.c_str(), id.c_str());
  o += format("<title id=\"%s-title\">", id.c_str()) + "Accuracy by residue (mod " + std::to_string(period) +
       "), " + protocol_title(name) + "</title>";
  o += format("<desc id=\"%s-desc\">", id.c_str()) + desc + "</desc>";
  o += format("<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>", f.width, f.height);

  // Bands behind everything: flagged residues, then the mean's interval.
  for (const Point& p : main.points) {
    if (!p.flagged) continue;
    o += format("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.09\"/>",
                f.x(p.r - 0.5), f.top, step, f.bottom - f.top, kVermillion);
  }
  if (main.has_mean && main.has_mean_ci) {
    o += format("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.10\"/>",
                f.left, f.y(main.mean_hi), f.right - f.left, f.y(main.mean_lo) - f.y(main.mean_hi), kBlue);
  }

  // Horizontal grid every 0.1, labelled every 0.2.
  for (int i = 0; i <= 10; ++i) {
    double a = i / 10.0;
    bool major = i % 2 == 0;
    if (i > 0 && i < 10) o += line(f.left, f.y(a), f.right, f.y(a), major ? "#DCE0E5" : "#EEF0F3", 1);
    if (major) o += label(f.left - 8, f.y(a) + 4, "end", "#4A5160", 12, format("%.1f", a));
  }

  // Vertical grid: a thin line per residue (when they are not a grey wash), thick lines at
  // multiples of each stride below P, thickest at 0 and P.
  if (step >= 4) {
    for (long long r = 1; r < period; ++r) o += line(f.x(r), f.top, f.x(r), f.bottom, "#E6E9ED", 1);
  }
  std::map<long long, std::vector<long long>> boundaries;  // residue -> strides with a window start there
  for (long long s : strides) {
    if (s < 2 || s >= period) continue;
    for (long long k = s; k < period; k += s) boundaries[k].push_back(s);
  }
  double last_label = -1e9;
  for (const auto& b : boundaries) {
    double x = f.x(static_cast<double>(b.first));
    o += line(x, f.top, x, f.bottom, "#737B87", 1.6);
    std::string t = "S=";
    for (size_t i = 0; i < b.second.size(); ++i) t += (i ? "," : "") + std::to_string(b.second[i]);
    if (x - last_label >= text_width(t.size(), 11) + 6) {
      o += label(x, f.top - 6, "middle", "#4A5160", 11, t);
      last_label = x;
    }
  }
  o += line(f.x(0), f.top, f.x(0), f.bottom, "#3A414D", 2.2);
  o += line(f.x(static_cast<double>(period)), f.top, f.x(static_cast<double>(period)), f.bottom, "#3A414D", 2.2);
  o += label(f.x(static_cast<double>(period)), f.top - 6, "middle", "#3A414D", 11,
             "P=" + std::to_string(period), " font-weight=\"600\"");

  // Mean lines with their values in the right margin, kept apart when they are close.
  double mean_y = main.has_mean ? f.y(main.mean) : 0;
  double ctrl_y = overlay && control->has_mean ? f.y(control->mean) : 0;
  double mean_ty = mean_y + 4, ctrl_ty = ctrl_y + 4;
  if (main.has_mean && overlay && control->has_mean && std::fabs(mean_ty - ctrl_ty) < 15) {
    double mid = (mean_ty + ctrl_ty) / 2;
    bool ctrl_above = ctrl_y <= mean_y;
    ctrl_ty = mid + (ctrl_above ? -7.5 : 7.5);
    mean_ty = mid + (ctrl_above ? 7.5 : -7.5);
  }
  if (overlay && control->has_mean) {
    o += line(f.left, ctrl_y, f.right, ctrl_y, kGrey, 1.3, " stroke-dasharray=\"2 3\"");
    o += label(f.right + 8, ctrl_ty, "start", "#5F6670", 12, "control &#256; " + fixed(control->mean, 3));
  }
  if (main.has_mean) {
    o += line(f.left, mean_y, f.right, mean_y, kBlue, 1.6, " stroke-dasharray=\"7 4\"");
    o += label(f.right + 8, mean_ty, "start", kBlue, 12, "&#256; = " + fixed(main.mean, 3),
               " font-weight=\"600\"");
  }

  // The control curve, grey, to the right of each residue.
  if (overlay) {
    o += polyline(f, control->points, shift, kGrey, 1.2, " stroke-dasharray=\"4 3\" stroke-opacity=\"0.8\"");
    for (const Point& p : control->points) {
      o += error_bar(f, f.x(p.r + shift), p.lo, p.hi, cap, kGrey, 1.2);
    }
    for (const Point& p : control->points) {
      o += circle(f.x(p.r + shift), f.y(p.acc), radius * 0.85, kGrey, "#fff", 1);
    }
  }

  // The curve under test, with residue 0 repeated hollow at r = P (the next period).
  const Point* first = main.points.empty() || main.points.front().r != 0 ? nullptr : &main.points.front();
  const Point* last = main.points.empty() || main.points.back().r != period - 1 ? nullptr : &main.points.back();
  o += polyline(f, main.points, -shift, kBlue, 1.5, " stroke-opacity=\"0.55\" stroke-linejoin=\"round\"");
  if (first != nullptr && last != nullptr) {
    o += line(f.x(last->r - shift), f.y(last->acc), f.x(static_cast<double>(period) - shift), f.y(first->acc),
              kBlue, 1.5, " stroke-opacity=\"0.45\" stroke-dasharray=\"2 3\"");
    o += circle(f.x(static_cast<double>(period) - shift), f.y(first->acc), radius,
                "#fff", first->flagged ? kVermillion : kBlue, 1.6);
  }
  for (const Point& p : main.points) {
    o += error_bar(f, f.x(p.r - shift), p.lo, p.hi, cap, p.flagged ? kVermillion : kBlue, p.flagged ? 2 : 1.5);
  }
  for (const Point& p : main.points) {
    double x = f.x(p.r - shift), y = f.y(p.acc);
    o += p.flagged ? diamond(x, y, std::max(4.5, radius * 1.5), kVermillion) : circle(x, y, radius, kBlue, "#fff", 1);
  }
  // Labels on flagged residues: under the interval (over it when there is no room below),
  // stepped down a line at a time past labels already placed; left out after four lines.
  struct Box {
    double x0, x1, y;
  };
  std::vector<Box> placed;
  for (const Point& p : main.points) {
    if (!p.flagged) continue;
    std::string t = step >= 64 ? format("r=%d weak", p.r) : format("%d", p.r);
    double x = f.x(p.r - shift), half = text_width(t.size()) / 2 + 2;
    bool below = f.y(p.lo) + 17 + 3 * 14 <= f.bottom - 4;
    for (int k = 0; k < 4; ++k) {
      double y = below ? f.y(p.lo) + 17 + 14 * k : f.y(p.hi) - 9 - 14 * k;
      bool free = std::none_of(placed.begin(), placed.end(), [&](const Box& b) {
        return std::fabs(b.y - y) < 13 && b.x0 < x + half && x - half < b.x1;
      });
      if (!free) continue;
      o += label(x, y, "middle", "#B34700", 12, t, " font-weight=\"700\"");
      placed.push_back({x - half, x + half, y});
      break;
    }
  }

  // Axes and ticks. Residue labels every k-th residue so that at most ~16 are written.
  o += line(f.left, f.bottom, f.right, f.bottom, kInk, 1.2);
  o += line(f.left, f.top, f.left, f.bottom, kInk, 1.2);
  long long every = 1;
  while (period / every > 16) every *= 2;
  for (long long r = 0; r < period; r += every) {
    o += line(f.x(r), f.bottom, f.x(r), f.bottom + 5, kInk, 1);
    o += label(f.x(r), f.bottom + 19, "middle", kInk, 12, std::to_string(r));
  }
  o += line(f.x(period), f.bottom, f.x(period), f.bottom + 5, kInk, 1);
  o += label(f.x(period), f.bottom + 19, "middle", "#6B7280", 12, "(0)", " font-style=\"italic\"");
  o += label((f.left + f.right) / 2, f.bottom + 44, "middle", kInk, 13,
             "residue r = token position mod P (P = " + std::to_string(period) + ")");
  o += format("<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\" fill=\"%s\" "
              "font-size=\"13\">retrieval accuracy</text>",
              (f.top + f.bottom) / 2, kInk);

  // Legend along the top.
  double lx = f.left, ly = 22;
  auto legend = [&](const std::string& symbol, const std::string& words, size_t chars) {
    o += symbol;
    o += label(lx + 20, ly + 4, "start", kInk, 12, words);
    lx += 20 + text_width(chars) + 22;
  };
  legend(line(lx + 7, ly - 7, lx + 7, ly + 7, kBlue, 1.5) + circle(lx + 7, ly, 4, kBlue, "#fff", 1),
         "accuracy, 95% Wilson interval", 29);
  legend(diamond(lx + 7, ly, 6, kVermillion), "flagged weak", 12);
  legend(line(lx, ly, lx + 15, ly, kBlue, 1.6, " stroke-dasharray=\"7 4\""), "mean &#256;, 95% band", 18);
  if (overlay) legend(circle(lx + 7, ly, 3.5, kGrey, "#fff", 1), "control", 7);
  legend(line(lx + 7, ly - 8, lx + 7, ly + 8, "#737B87", 1.6), "stride boundary", 15);
  o += "</svg>";
  return o;
}

// ---- Page sections -------------------------------------------------------------------------

const char* kStyle = R"CSS(
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #EEF1F4; color: #1D2330;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Liberation Sans", sans-serif; }
main { max-width: 960px; margin: 0 auto; padding: 28px 40px 40px; background: #fff; min-height: 100vh; }
h1 { font-size: 26px; line-height: 1.2; margin: 0; letter-spacing: -0.01em; overflow-wrap: anywhere; }
h2 { font-size: 19px; margin: 36px 0 6px; padding-top: 18px; border-top: 1px solid #E3E6EA; }
h3 { font-size: 15px; margin: 20px 0 6px; }
p { margin: 6px 0; }
.eyebrow { font-size: 12px; font-weight: 600; letter-spacing: 0.08em; text-transform: uppercase; color: #5B6472; }
.head { display: flex; justify-content: space-between; align-items: flex-start; gap: 16px; }
.sub { color: #4A5160; margin-top: 6px; }
.muted { color: #5F6670; }
.mono, code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono", monospace;
  font-size: 13px; overflow-wrap: anywhere; }
.hash { font-size: 12px; color: #5F6670; word-break: break-all; }
.badge { flex: none; font-weight: 700; font-size: 14px; padding: 6px 14px; border-radius: 6px; border: 1px solid; }
.badge.pass { color: #0F5C2E; background: #E7F4EC; border-color: #0F5C2E; }
.badge.fail { color: #A4160A; background: #FDECEA; border-color: #A4160A; }
.badge.none { color: #4A5160; background: #F2F4F7; border-color: #9AA1AC; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 5px 18px; margin: 18px 0 0; }
dl.meta dt { color: #5B6472; font-weight: 600; }
dl.meta dd { margin: 0; }
ul.plain { list-style: none; margin: 0; padding: 0; }
table { border-collapse: collapse; width: 100%; font-size: 14px; font-variant-numeric: tabular-nums; margin: 8px 0; }
th, td { padding: 5px 10px; border-bottom: 1px solid #E3E6EA; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #F2F4F7; color: #2F3643; font-weight: 600; border-bottom: 1px solid #C9CED6; }
table.summary { font-size: 13.5px; }
table.summary th { white-space: normal; vertical-align: bottom; }
table.summary td:first-child { white-space: normal; min-width: 120px; }
table.narrow { width: auto; min-width: 60%; }
tr.weak td { background: #FCEEE6; }
tr.control td { color: #4A5160; }
td.left, th.left { text-align: left; }
.chip { display: inline-block; min-width: 22px; text-align: center; padding: 0 7px; margin-right: 4px; border-radius: 10px;
  font-size: 13px; font-weight: 700; line-height: 20px; }
.chip.weak { background: #A84300; color: #fff; }
.chip.pass { background: #0F5C2E; color: #fff; }
.chip.fail { background: #A4160A; color: #fff; }
.bad { color: #A84300; font-weight: 700; }
figure { margin: 10px 0 4px; }
figure svg { display: block; width: 100%; max-width: 800px; height: auto; }
figcaption { color: #4A5160; font-size: 13px; margin-top: 4px; max-width: 800px; }
.note { background: #F5F7FA; border-left: 3px solid #9AA1AC; padding: 8px 12px; margin: 10px 0; }
ul.advice { margin: 8px 0; padding-left: 22px; }
footer { margin-top: 36px; padding-top: 12px; border-top: 1px solid #E3E6EA; font-size: 12px; color: #5F6670; }
sup { font-size: 0.75em; line-height: 0; }
@media print { body { background: #fff; } main { padding: 0; } h2 { break-after: avoid; } figure { break-inside: avoid; } }
)CSS";

std::string memories_list(const json* memories) {
  if (length(memories) == 0) return std::string(kDash) + "<br>";
  std::string o = "<ul class=\"plain\">";
  for (size_t i = 0; i < length(memories); ++i) {
    o += "<li><code>" + esc(text(element(memories, i))) + "</code></li>";
  }
  return o + "</ul>";
}

std::string join_ints(const std::vector<long long>& v, const char* sep = ", ") {
  std::string o;
  for (size_t i = 0; i < v.size(); ++i) o += (i ? sep : "") + std::to_string(v[i]);
  return o;
}

std::string period_source_words(const std::string& source, const std::vector<long long>& strides) {
  if (source == "strides") {
    return strides.empty() ? "from the model strides" : "from the model strides (" + join_ints(strides) + ")";
  }
  if (source == "override") return "set with --period";
  if (source == "scan") return "found by the spectral scan";
  return source.empty() ? "" : esc(source);
}

std::string header_section(const json& r, long long period) {
  const json* inputs = member(&r, "inputs");
  const json* model = member(&r, "model");
  const json* gates = member(&r, "gates");
  const std::vector<long long> strides = integers(member(model, "strides"));
  std::string o = "<header><div class=\"head\"><div><div class=\"eyebrow\">PhaseKV phase self-test</div>";
  std::string model_name = text(member(inputs, "model"));
  o += "<h1>" + (model_name.empty() ? std::string("Self-test report") : esc(model_name)) + "</h1>";
  o += "<div class=\"sub\">template <code>" + esc(text(member(inputs, "template"))) + "</code> &#183; period P = " +
       (period > 0 ? std::to_string(period) : std::string(kDash)) + " " +
       period_source_words(text(member(&r, "period_source")), strides) + "</div></div>";
  const json* checks = member(gates, "checks");
  if (member(gates, "pass") == nullptr) {
    o += "<div class=\"badge none\">no gate verdict</div>";
  } else if (length(checks) == 0) {
    o += "<div class=\"badge none\">no gates set</div>";
  } else if (boolean(member(gates, "pass"))) {
    o += "<div class=\"badge pass\">Gates passed</div>";
  } else {
    o += "<div class=\"badge fail\">Gates failed</div>";
  }
  o += "</div>";

  const json* tmpl = member(&r, "template");
  o += "<dl class=\"meta\">";
  o += "<dt>Model</dt><dd><span class=\"mono hash\">sha256 " + esc(text(member(inputs, "model_sha256"))) +
       "</span></dd>";
  o += "<dt>Memories</dt><dd>" + memories_list(member(model, "memories")) + "<span class=\"muted\">" +
       count(member(model, "n_layers")) + " layers &#183; strides " +
       (strides.empty() ? std::string("none") : join_ints(strides)) + " &#183; largest local window " +
       count(member(model, "max_local")) + "</span></dd>";
  o += "<dt>Template</dt><dd><code>" + esc(text(member(inputs, "template"))) +
       "</code><br><span class=\"mono hash\">sha256 " + esc(text(member(inputs, "template_sha256"))) +
       "</span><br>slot at token " + count(member(tmpl, "t0")) + ", phase " + count(member(tmpl, "phase")) +
       " (mod P) &#183; " + count(member(tmpl, "prefix_tokens")) + " tokens before, " +
       count(member(tmpl, "suffix_tokens")) + " after</dd>";
  long long override_p = 0;
  o += "<dt>Sampling</dt><dd>" + count(member(inputs, "samples_per_stage")) + " samples per stage &#183; n_ctx " +
       plain(member(inputs, "n_ctx")) + " &#183; seed " + plain(member(inputs, "seed")) +
       (integer(member(inputs, "period_override"), &override_p) ? " &#183; --period " + std::to_string(override_p)
                                                                 : std::string()) +
       "</dd>";
  o += "<dt>Test</dt><dd>&#945; = " + fixed(member(inputs, "alpha"), 3) + " false-alarm rate of the flags &#183; &#948; = " +
       fixed(member(inputs, "delta"), 3) + " &#183; control run " +
       (boolean(member(inputs, "control")) ? "requested" : "not requested") + "</dd>";
  double budget = 0;
  o += "<dt>Run</dt><dd><code>" + esc(text(member(inputs, "kernels"))) + "</code> kernels &#183; " +
       count(member(inputs, "threads")) + (plain(member(inputs, "threads")) == "1" ? " thread" : " threads") +
       " &#183; budget " +
       (number(member(inputs, "budget_s"), &budget) ? fixed(budget, 0) + " s" : std::string("unlimited")) +
       " &#183; phasekv " + esc(text(member(&r, "phasekv_version"))) + "</dd>";
  o += "</dl></header>";
  return o;
}

std::string summary_row(const std::string& label_html, const json* protocol, const char* cls) {
  const json* s = member(protocol, "summary");
  long long argmin = 0;
  bool has_argmin = integer(member(s, "argmin"), &argmin);
  double gap = 0, gap_null = 0;
  bool above_null = number(member(s, "gap"), &gap) && number(member(s, "gap_null"), &gap_null) && gap > gap_null;
  std::string o = format("<tr class=\"%s\"><td>", cls) + label_html + "</td>";
  o += "<td>" + fixed(member(s, "mean_accuracy"), 3) + " <span class=\"muted\">" +
       interval(member(s, "mean_ci"), 3) + "</span></td>";
  o += "<td>" + fixed(member(s, "min_accuracy"), 3) +
       (has_argmin ? " <span class=\"muted\">(r = " + std::to_string(argmin) + ")</span>" : "") + "</td>";
  o += "<td>" + fixed(member(s, "min_accuracy_split"), 3) + "</td>";
  o += std::string("<td>") + (above_null ? "<span class=\"bad\">" : "<span>") + fixed(member(s, "gap"), 3) +
       "</span> <span class=\"muted\">vs " + fixed(member(s, "gap_null"), 3) + "</span></td>";
  o += "<td>" + fixed(member(s, "sd"), 3) + "</td>";
  o += "<td>" + pvalue(member(s, "cochran_p")) + "</td>";
  o += "<td class=\"left\">" + residue_chips(integers(member(protocol, "flagged"))) + "</td></tr>";
  return o;
}

std::string summary_section(const json& r) {
  auto main = protocols_of(member(&r, "protocols"));
  const json* control = member(&r, "control");
  auto ctrl = protocols_of(member(control, "protocols"));
  std::string o = "<section><h2>Summary</h2>";
  if (main.empty() && ctrl.empty()) return o + "<p class=\"muted\">The report holds no protocol results.</p></section>";
  o += "<table class=\"summary\"><thead><tr><th>Run</th><th>&#256; [95% CI]</th><th>A<sub>min</sub></th>"
       "<th title=\"A_min re-measured on held-out clusters\">A<sub>min</sub> split</th>"
       "<th>&#916; vs null &#916;</th><th>&#963;</th><th>Cochran p</th><th class=\"left\">Flagged</th>"
       "</tr></thead><tbody>";
  for (const auto& p : main) o += summary_row(protocol_title(p.first), p.second, "");
  for (const auto& p : ctrl) o += summary_row("Control &#183; " + protocol_title(p.first), p.second, "control");
  o += "</tbody></table>";
  o += "<p>Residues flagged weak (any protocol): " + residue_chips(integers(member(&r, "flagged"))) + "</p>";
  if (control != nullptr && control->is_object()) {
    double gap = 0;
    o += "<p class=\"muted\">Control: the same probes on ";
    const json* mem = member(control, "memories");
    if (length(mem) == 0) o += "the uncompressed model";
    for (size_t i = 0; i < length(mem); ++i) {
      o += (i ? ", <code>" : "<code>") + esc(text(element(mem, i))) + "</code>";
    }
    if (number(member(control, "compression_gap"), &gap)) {
      o += "; compression costs " + fixed(gap, 3) + " mean accuracy (control &#8722; compressed, averaged over "
           "protocols)";
    }
    o += ". Flagged in the control: " + residue_chips(integers(member(control, "flagged"))) + "</p>";
  }

  const json* gates = member(&r, "gates");
  const json* checks = member(gates, "checks");
  o += "<h3>Gates</h3>";
  if (length(checks) == 0) {
    o += "<p class=\"muted\">No gate is set (--gate-min-acc, --gate-max-gap); the self-test always passes.</p>";
  } else {
    o += "<table class=\"narrow\"><thead><tr><th>Gate</th><th>Threshold</th><th>Measured</th><th>Result</th></tr></thead><tbody>";
    for (size_t i = 0; i < length(checks); ++i) {
      const json* c = element(checks, i);
      const std::string& name = text(member(c, "name"));
      std::string rule = name == "min_acc"   ? "worst residue accuracy A<sub>min</sub> &#8805;"
                         : name == "max_gap" ? "gap &#916; &#8804;"
                                             : esc(name);
      o += "<tr><td>" + rule + "</td><td>" + fixed(member(c, "threshold"), 3) + "</td><td>" +
           fixed(member(c, "value"), 3) + "</td><td>" + pass_chip(boolean(member(c, "pass"))) + "</td></tr>";
    }
    o += "</tbody></table>";
  }
  return o + "</section>";
}

const json* find_protocol(const std::vector<std::pair<std::string, const json*>>& v, const std::string& name) {
  for (const auto& p : v) {
    if (p.first == name) return p.second;
  }
  return nullptr;
}

std::string protocol_section(const json& r, const std::string& name, const json* protocol, long long period,
                             int figure) {
  const json* model = member(&r, "model");
  const json* control = member(&r, "control");
  auto ctrl = protocols_of(member(control, "protocols"));
  const json* ctrl_protocol = find_protocol(ctrl, name);
  std::string o = "<section><h2>" + protocol_title(name) + "</h2>";
  std::string blurb = protocol_blurb(name);
  o += "<p class=\"muted\">" + blurb + (blurb.empty() ? "" : " ") + count(member(protocol, "clusters")) +
       " clusters per stage, " + count(member(protocol, "probes")) + " probes.</p>";

  if (period >= 1 && period <= kMaxPlotPeriod) {
    Curve main = read_curve(protocol, period);
    Curve ctrl_curve;
    if (ctrl_protocol != nullptr) ctrl_curve = read_curve(ctrl_protocol, period);
    std::string id = format("fig%d", figure);
    o += "<figure>" + plot_svg(id, name, period, main, ctrl_protocol ? &ctrl_curve : nullptr,
                               integers(member(model, "strides")));
    o += format("<figcaption><b>Figure %d.</b> ", figure) +
         "Retrieval accuracy at each residue r of the target's token position, with 95% Wilson intervals; "
         "dashed line: mean &#256; over residues on its 95% cluster-bootstrap band. Residues flagged weak (two-stage "
         "test, false-alarm rate &#945;) are orange diamonds. Thick lines mark multiples of each model stride and the period "
         "boundaries 0 and P; the hollow point at P repeats residue 0.";
    if (ctrl_protocol != nullptr) o += " Grey: the control run (uncompressed memories) on the same probes.";
    o += "</figcaption></figure>";
  } else {
    o += "<p class=\"muted\">No plot: the report has no usable period P.</p>";
  }

  const json* scan = member(protocol, "period_scan");
  if (scan != nullptr) {
    o += "<p><b>Period scan:</b> ";
    long long sp = 0;
    bool has_p = integer(member(scan, "period"), &sp);
    if (boolean(member(scan, "detected"))) {
      o += "dominant period " + (has_p ? std::to_string(sp) : std::string(kDash)) + " detected (p = " +
           pvalue(member(scan, "p")) + ")";
    } else {
      o += "no significant period (best " + (has_p ? std::to_string(sp) : std::string(kDash)) + ", p = " +
           pvalue(member(scan, "p")) + ")";
    }
    const json* cands = member(scan, "candidates");
    if (length(cands) > 0) {
      o += "<span class=\"muted\"> &#183; candidates: ";
      for (size_t i = 0; i < length(cands); ++i) {
        const json* c = element(cands, i);
        o += (i ? "; " : "") + count(member(c, "period")) + " (power " + fixed(member(c, "power"), 3) + ", p " +
             pvalue(member(c, "p")) + ")";
      }
      o += "</span>";
    }
    const json* s = member(protocol, "summary");
    o += ". <span class=\"muted\">&#916;/&#256; = " + fixed(member(s, "gap_rel"), 3) + ", MDE " +
         fixed(member(s, "mde"), 3) + ", ICC " + fixed(member(s, "icc"), 3) + ".</span></p>";
  }

  const json* residues = member(protocol, "residues");
  if (length(residues) > 0) {
    o += "<table><thead><tr><th>r</th><th>n</th><th>hits</th><th>A<sub>r</sub></th><th>95% Wilson</th>"
         "<th>NLL</th><th>NLL excess</th><th>LOO z</th><th>LOO p</th><th>Holm p</th><th class=\"left\">Weak</th>"
         "</tr></thead><tbody>";
    for (size_t i = 0; i < length(residues); ++i) {
      const json* e = element(residues, i);
      bool weak = boolean(member(e, "flagged"));
      o += std::string(weak ? "<tr class=\"weak\">" : "<tr>") + "<td>" + count(member(e, "r")) + "</td><td>" +
           count(member(e, "n")) + "</td><td>" + count(member(e, "hits")) + "</td><td>" +
           fixed(member(e, "accuracy"), 3) + "</td><td>" + interval(member(e, "ci"), 3) + "</td><td>" +
           fixed(member(e, "nll"), 3) + "</td><td>" + fixed(member(e, "nll_excess"), 3) + "</td><td>" +
           fixed(member(e, "loo_z"), 2) + "</td><td>" + pvalue(member(e, "loo_p")) + "</td><td>" +
           pvalue(member(e, "holm_p")) + "</td><td class=\"left\">" +
           (weak ? "<span class=\"chip weak\">weak</span>" : "") + "</td></tr>";
    }
    o += "</tbody></table>";
  }
  return o + "</section>";
}

std::string template_section(const json& r, long long period) {
  const json* tmpl = member(&r, "template");
  if (tmpl == nullptr) return "";
  std::string o = "<section><h2>Template map</h2>";
  o += "<p>The content slot starts at token " + count(member(tmpl, "t0")) + ", phase " +
       count(member(tmpl, "phase")) + (period > 0 ? " (mod " + std::to_string(period) + ")" : std::string()) +
       ". Content tokens at offset k from the slot start land on residue (t0 + k) mod P:</p>";
  const json* map = member(tmpl, "map");
  if (length(map) > 0) {
    o += "<table class=\"narrow\"><thead><tr><th>Content offset k mod P</th><th>Residue</th><th>Accuracy</th>"
         "<th class=\"left\">Status</th></tr></thead><tbody>";
    for (size_t i = 0; i < length(map); ++i) {
      const json* e = element(map, i);
      bool weak = boolean(member(e, "weak"));
      o += std::string(weak ? "<tr class=\"weak\">" : "<tr>") + "<td>" + count(member(e, "offset")) +
           "</td><td>" + count(member(e, "residue")) + "</td><td>" + fixed(member(e, "accuracy"), 3) +
           "</td><td class=\"left\">" + (weak ? "<span class=\"chip weak\">weak</span>" : "ok") + "</td></tr>";
    }
    o += "</tbody></table>";
  }
  const json* advice = member(tmpl, "advice");
  if (advice != nullptr) {
    o += "<h3>Advice</h3><div class=\"note\">Strongest residue: <b>" + count(member(advice, "strongest_residue")) +
         "</b> &#183; neutral tokens to add before the slot: <b>" + count(member(advice, "pad_tokens_before_slot")) +
         "</b></div>";
    const json* lines = member(advice, "text");
    if (length(lines) > 0) {
      o += "<ul class=\"advice\">";
      for (size_t i = 0; i < length(lines); ++i) o += "<li>" + esc(text(element(lines, i))) + "</li>";
      o += "</ul>";
    }
  }
  return o + "</section>";
}

// The phase guard scored on the probes (selftest --guard): both sides per residue.
std::string guard_section(const json& r) {
  const json* g = member(&r, "guard");
  if (g == nullptr) return "";
  std::string o = "<section><h2>Phase guard</h2>";
  long long shift = 0;
  integer(member(g, "shift"), &shift);
  if (shift == 0) return o + "<p>Inactive: stage 1 found no weak residue to move.</p></section>";
  o += "<p>Outer probes, branch B shifted by " + count(member(g, "shift")) + " tokens" +
       (boolean(member(g, "auto")) ? " (chosen on stage 1, scored on stage 2)" : "") + ", " +
       count(member(g, "clusters")) + " samples; each lookup answered by the more confident branch.</p>";
  const json* un = member(g, "unguarded");
  const json* gu = member(g, "guarded");
  const json* ua = member(un, "accuracy");
  const json* ga = member(gu, "accuracy");
  if (length(ua) > 0 && length(ua) == length(ga)) {
    o += "<table class=\"narrow\"><thead><tr><th>Residue</th><th>Without the guard</th><th>With the guard</th>"
         "</tr></thead><tbody>";
    for (size_t i = 0; i < length(ua); ++i)
      o += "<tr><td>" + std::to_string(i) + "</td><td>" + fixed(element(ua, i), 3) + "</td><td>" +
           fixed(element(ga, i), 3) + "</td></tr>";
    o += "</tbody></table>";
  }
  const json* wci = member(g, "worst_gain_ci");
  const json* mci = member(g, "mean_gain_ci");
  o += "<div class=\"note\">Paired gain at the worst residue " + count(member(g, "worst_residue")) + ": <b>" +
       fixed(member(g, "worst_gain"), 3) + "</b> [" + fixed(element(wci, 0), 3) + ", " + fixed(element(wci, 1), 3) +
       "]; over all residues " + fixed(member(g, "mean_gain"), 3) + " [" + fixed(element(mci, 0), 3) + ", " +
       fixed(element(mci, 1), 3) + "] (cluster bootstrap, 95 %).</div>";
  return o + "</section>";
}

std::string timings_section(const json& r) {
  const json* t = member(&r, "timings");
  if (t == nullptr) return "";
  std::string o = "<section><h2>Timings</h2><table class=\"narrow\"><tbody>";
  double total = 0;
  o += "<tr><td>Total time</td><td>" +
       (number(member(t, "total_s"), &total) ? fixed(total, 1) + " s" : std::string(kDash)) + "</td></tr>";
  o += "<tr><td>Probes scored</td><td>" + count(member(t, "probes")) + "</td></tr>";
  o += "<tr><td>Probes per second</td><td>" + fixed(member(t, "probes_per_s"), 2) + "</td></tr>";
  o += "<tr><td>Tokens prefilled (shared prefixes reused)</td><td>" + count(member(t, "prefill_tokens")) +
       "</td></tr>";
  o += "<tr><td>Tokens a prefill per probe would cost</td><td>" + count(member(t, "naive_prefill_tokens")) +
       "</td></tr>";
  long long done = 0, naive = 0;
  if (integer(member(t, "prefill_tokens"), &done) && integer(member(t, "naive_prefill_tokens"), &naive) &&
      done > 0) {
    o += "<tr><td>Prefill saved by reuse</td><td>" +
         fixed(static_cast<double>(naive) / static_cast<double>(done), 1) + "&#215;</td></tr>";
  }
  return o + "</tbody></table></section>";
}

}  // namespace

std::string render_selftest_html(const json& report) {
  std::string o;
  o.reserve(64 * 1024);
  const json* inputs = member(&report, "inputs");
  o += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>";
  std::string model_name = text(member(inputs, "model"));
  o += "PhaseKV self-test" + (model_name.empty() ? std::string() : " &#8212; " + esc(model_name));
  o += "</title>\n<style>";
  o += kStyle;
  o += "</style>\n</head>\n<body>\n<main>\n";
  if (!report.is_object()) {
    o += "<h1>Not a self-test report</h1><p>The input is not a JSON object.</p>\n</main>\n</body>\n</html>\n";
    return o;
  }

  long long period = 0;
  if (!integer(member(&report, "period"), &period) || period < 1) {
    period = 0;  // fall back on the longest residue list
    const json* all = member(&report, "protocols");
    for (const auto& p : protocols_of(all)) {
      period = std::max(period, static_cast<long long>(length(member(p.second, "residues"))));
    }
  }

  o += header_section(report, period);
  o += "\n";
  o += summary_section(report);
  o += "\n";
  int figure = 1;
  for (const auto& p : protocols_of(member(&report, "protocols"))) {
    o += protocol_section(report, p.first, p.second, period, figure++);
    o += "\n";
  }
  o += template_section(report, period);
  o += "\n";
  o += guard_section(report);
  o += timings_section(report);
  o += "\n<footer>Report format <code>" + esc(text(member(&report, "schema"))) + "</code> &#183; written by phasekv " +
       esc(text(member(&report, "phasekv_version"))) +
       " &#183; accuracy is greedy exact match of the value token.</footer>\n</main>\n</body>\n</html>\n";
  return o;
}

}  // namespace tools
}  // namespace phasekv
