// Tokenizers built from the vocabulary stored in the model file:
//   * byte-level BPE (GPT-2 style; GGUF "gpt2") with the model's pre-tokenizer. Supported
//     pre-tokenizers: "smollm"/"starcoder" family (digits split one by one, then the GPT-2
//     regex) and "default"/"gpt2" (the GPT-2 regex alone). Unicode classes come from PCRE2.
//   * SentencePiece-style BPE (GGUF "llama"): scores rank merges, "▁" marks spaces, byte
//     fallback tokens <0xXX> cover anything else.
// Control and user-defined tokens are "special": encode() matches their literal text only
// when parse_special is set (templates), never inside user content by default.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model_spec.h"
#include "utf8.h"

namespace phasekv {

class Tokenizer {
 public:
  static Status create(const TokenizerData& data, std::unique_ptr<Tokenizer>* out);
  virtual ~Tokenizer() = default;

  // Encodes UTF-8 `text`. Invalid UTF-8 is an error naming the byte offset. BOS/EOS are not
  // added here (the caller decides; see add_bos()).
  Status encode(std::string_view text, bool parse_special, std::vector<int32_t>* out) const;
  // As encode with parse_special, but a special token's text counts as that token only where
  // special_ok (one flag per byte of text) is set on all of its bytes; elsewhere it is plain
  // text. The runs between accepted specials are encoded whole, exactly as encode does.
  Status encode_masked(std::string_view text, const std::vector<uint8_t>& special_ok,
                       std::vector<int32_t>* out) const;
  // Concatenated bytes of the tokens (specials as their text). Can end in a partial UTF-8
  // sequence; use StreamDecoder for text shown to people.
  Status decode(const std::vector<int32_t>& ids, std::string* out) const;
  // Bytes of one token.
  Status token_bytes(int32_t id, std::string* out) const;

  int32_t n_tokens() const { return int32_t(tokens_.size()); }
  bool is_special(int32_t id) const { return id >= 0 && id < n_tokens() && special_[size_t(id)]; }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  bool add_bos() const { return add_bos_; }
  // id of a token by its exact text, or -1.
  int32_t find(const std::string& text) const;
  // The most bytes of text one token of encode()'s output stands for (computed once in
  // create): every token covers at most this many bytes, so a text of B bytes encodes to at
  // least ceil(B / max_token_bytes()) tokens. Callers use it to refuse a prompt that cannot
  // fit a context before encoding it. Byte-level BPE: the longest token's decoded bytes; a
  // byte the vocabulary has no token for is dropped by encode (as HF tokenizers do) and
  // covers no token, so count B without such bytes (SmolLM2 lacks e.g. 0x04). SentencePiece:
  // the longest token's stored text, which is at least its decoded bytes: a "▁" stands for
  // a space (1 byte) but also for a literal U+2581 in the text (3 bytes). 0 only for a
  // vocabulary of empty tokens.
  size_t max_token_bytes() const { return max_token_bytes_; }
  // A lower bound on the tokens encode() gives for `text` (BOS aside): the bytes a token can
  // stand for, over max_token_bytes(), rounded up; bytes encode drops are not counted.
  uint64_t min_tokens(std::string_view text) const;

 protected:
  Tokenizer() = default;
  Status encode_impl(std::string_view text, bool parse_special, const std::vector<uint8_t>* special_ok,
                     std::vector<int32_t>* out) const;
  // Encodes one run of text that contains no special token.
  virtual Status encode_plain(std::string_view text, std::vector<int32_t>* out) const = 0;
  virtual void append_token_bytes(int32_t id, std::string* out) const = 0;
  // The most bytes of text that encode_plain can cover with one `id` (see max_token_bytes).
  virtual size_t covered_bytes_bound(int32_t id) const = 0;
  // Whether encode drops byte b without a token (byte-level BPE: no token for it).
  virtual bool byte_dropped(uint8_t) const { return false; }

  std::vector<std::string> tokens_;
  std::vector<bool> special_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<int32_t> specials_by_length_;  // special token ids, longest text first
  bool special_lead_[256] = {};              // bytes that start some special token's text
  size_t max_token_bytes_ = 0;
  int32_t bos_ = -1, eos_ = -1, eot_ = -1;
  bool add_bos_ = false;
};

// Turns a stream of tokens into text without ever emitting a broken UTF-8 sequence:
// bytes of an incomplete character wait for the next token; bytes that can never form a
// valid character become U+FFFD.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  // Appends the newly complete text to *out.
  Status push(int32_t id, std::string* out);
  // Emits whatever is pending (an unfinished character becomes U+FFFD).
  void flush(std::string* out);
  void reset() { pending_.clear(); }

 private:
  void drain(std::string* out, bool final);
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace phasekv
