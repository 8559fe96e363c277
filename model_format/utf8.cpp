#include "utf8.h"

namespace phasekv {

int utf8_sequence_length(const unsigned char* s, size_t n) {
  if (n == 0) return 0;
  const unsigned char c = s[0];
  int len;
  uint32_t min_cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) { len = 2; min_cp = 0x80; }
  else if (c >= 0xE0 && c <= 0xEF) { len = 3; min_cp = 0x800; }
  else if (c >= 0xF0 && c <= 0xF4) { len = 4; min_cp = 0x10000; }
  else return -1;
  uint32_t cp = c & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    if (size_t(i) >= n) return 0;  // incomplete so far
    if ((s[i] & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (s[i] & 0x3F);
    // Reject overlongs, surrogates and > U+10FFFF as early as the second byte allows.
    if (i == 1) {
      if (len == 3 && c == 0xE0 && s[1] < 0xA0) return -1;
      if (len == 3 && c == 0xED && s[1] >= 0xA0) return -1;
      if (len == 4 && c == 0xF0 && s[1] < 0x90) return -1;
      if (len == 4 && c == 0xF4 && s[1] >= 0x90) return -1;
    }
  }
  if (cp < min_cp) return -1;
  return len;
}

int64_t utf8_first_invalid(std::string_view text) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const int l = utf8_sequence_length(s + i, text.size() - i);
    if (l <= 0) return int64_t(i);
    i += size_t(l);
  }
  return -1;
}

}  // namespace phasekv
