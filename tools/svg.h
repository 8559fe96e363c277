// SVG and HTML text primitives for the self-contained report pages (selftest_html.cpp): printf-
// style formatting, HTML escaping, and the few SVG elements the plots are drawn with. Coordinates
// are SVG user units, printed with one decimal; strings passed as attributes are trusted (the
// callers pass constants); text bodies must already be escaped with esc().
#pragma once

#include <cstddef>
#include <string>

namespace phasekv {
namespace tools {

// printf into a std::string (any length).
std::string format(const char* f, ...) __attribute__((format(printf, 1, 2)));

// HTML-escapes text for element content and quoted attributes. C0 controls other than tab,
// newline and carriage return are not allowed in HTML text; they become U+FFFD.
std::string esc(const std::string& s);

std::string line(double x1, double y1, double x2, double y2, const char* stroke, double width,
                 const char* extra = "");
// <text> at (x, y); body is inserted as is (escape it first).
std::string label(double x, double y, const char* anchor, const char* fill, int size, const std::string& body,
                  const char* extra = "");
std::string circle(double x, double y, double r, const char* fill, const char* stroke, double sw);
// A diamond of half-diagonal r centred at (x, y), white outline.
std::string diamond(double x, double y, double r, const char* fill);
// Rough width of `n` characters of 12-unit system-ui text, for laying out labels.
double text_width(size_t n, double size = 12);

}  // namespace tools
}  // namespace phasekv
