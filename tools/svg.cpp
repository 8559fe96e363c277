// SVG and HTML text primitives; see svg.h.
#include "svg.h"

#include <cstdarg>
#include <cstdio>

namespace phasekv {
namespace tools {

std::string format(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  int n = std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  if (n < 0) return std::string();
  if (static_cast<size_t>(n) < sizeof buf) return std::string(buf, static_cast<size_t>(n));
  std::string s(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, f);
  std::vsnprintf(&s[0], s.size(), f, ap);
  va_end(ap);
  s.resize(static_cast<size_t>(n));
  return s;
}

// HTML-escapes text for element content and quoted attributes. C0 controls other than tab,
// newline and carriage return are not allowed in HTML text; they become U+FFFD.
std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 16);
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#x27;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          o += "&#65533;";
        } else {
          o += c;
        }
    }
  }
  return o;
}

std::string line(double x1, double y1, double x2, double y2, const char* stroke, double width,
                 const char* extra) {
  return format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.2g\"%s/>",
                x1, y1, x2, y2, stroke, width, extra);
}

std::string label(double x, double y, const char* anchor, const char* fill, int size,
                  const std::string& body, const char* extra) {
  return format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" fill=\"%s\" font-size=\"%d\"%s>", x, y,
                anchor, fill, size, extra) +
         body + "</text>";
}

std::string circle(double x, double y, double r, const char* fill, const char* stroke, double sw) {
  return format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" stroke=\"%s\" stroke-width=\"%.2g\"/>",
                x, y, r, fill, stroke, sw);
}

std::string diamond(double x, double y, double r, const char* fill) {
  return format("<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"1\"/>",
                x, y - r, x + r, y, x, y + r, x - r, y, fill);
}

double text_width(size_t n, double size) {
  return static_cast<double>(n) * size * 0.56;
}

}  // namespace tools
}  // namespace phasekv
