// UTF-8 checks shared by the tokenizer, the tools and the display of untrusted strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace phasekv {

// Length of the valid UTF-8 sequence starting at s[0] (1..4), 0 if s[0..n) starts an
// incomplete but so-far valid sequence, -1 if it is invalid.
int utf8_sequence_length(const unsigned char* s, size_t n);
// Byte offset of the first invalid UTF-8 sequence in text, or -1 if it is all valid.
int64_t utf8_first_invalid(std::string_view text);

}  // namespace phasekv
