// Byte-level BPE (GPT-2 style) with the model's pre-tokenizer.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <climits>
#include <memory>

#include "tokenizer.h"

namespace phasekv {

namespace {

// GPT-2's byte -> code point map: printable bytes map to themselves, the rest to 256+n.
struct ByteMap {
  std::string encoded[256];          // UTF-8 text of each byte's code point
  std::unordered_map<uint32_t, uint8_t> decode;  // code point -> byte
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
      encoded[b] = cp < 0x80 ? std::string(1, char(cp))
                             : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
      decode[cp] = uint8_t(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// The GPT-2 pre-tokenizer regex (identical in HF tokenizers' ByteLevel and llama.cpp).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Qwen2's (and Qwen3's, GGUF tokenizer.pre "qwen2"): contractions in any case, a letter run
// with at most one leading non-letter, single digits, punctuation runs with their newlines,
// newline runs, then whitespace as GPT-2 (HF tokenizer.json of Qwen2.5 / Qwen3; llama.cpp's
// LLAMA_VOCAB_PRE_TYPE_QWEN2).
constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

class BpeTokenizer final : public Tokenizer {
 public:
  ~BpeTokenizer() override {
    if (re_) pcre2_code_free(re_);
    if (digit_re_) pcre2_code_free(digit_re_);
  }

  Status init(const TokenizerData& d) {
    const char* pattern = kGpt2Pattern;
    if (d.pre == "smollm" || d.pre == "starcoder" || d.pre == "refact" || d.pre == "codeshell") {
      split_digits_ = true;
    } else if (d.pre.empty() || d.pre == "default" || d.pre == "gpt2" || d.pre == "gpt-2") {
      split_digits_ = false;
    } else if (d.pre == "qwen2") {
      split_digits_ = false;  // the pattern takes digits one at a time itself
      pattern = kQwen2Pattern;
    } else {
      return make_error(StatusCode::kUnsupported,
                        "tokenizer.pre = '%s' is not supported (smollm, starcoder, qwen2, gpt2, default are)",
                        d.pre.c_str());
    }
    PKV_RETURN_IF_ERROR(compile(pattern, &re_));
    PKV_RETURN_IF_ERROR(compile("\\p{N}", &digit_re_));
    ranks_.reserve(d.merges.size());
    for (size_t i = 0; i < d.merges.size(); ++i) {
      const std::string& m = d.merges[i];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= m.size())
        return make_error(StatusCode::kInvalidFile, "tokenizer.merges[%zu] = '%s' is not 'left right'", i, m.c_str());
      ranks_.emplace(m, int32_t(i));
    }
    return Status::Ok();
  }

 protected:
  Status encode_plain(std::string_view text, std::vector<int32_t>* out) const override {
    // Match data per call: contexts sharing one model may encode concurrently.
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create(8, nullptr),
                                                                       pcre2_match_data_free);
    if (!md) return make_error(StatusCode::kOutOfMemory, "tokenizer: cannot allocate match data");
    pcre2_match_data* m = md.get();
    if (!split_digits_) return encode_regex(text, m, out);
    // Digits(individual_digits): every \p{N} character is a piece of its own.
    size_t start = 0, pos = 0;
    while (pos < text.size()) {
      size_t ms = 0, me = 0;
      if (!next_match(digit_re_, m, text, pos, &ms, &me)) break;
      if (ms > start) PKV_RETURN_IF_ERROR(encode_regex(text.substr(start, ms - start), m, out));
      PKV_RETURN_IF_ERROR(encode_regex(text.substr(ms, me - ms), m, out));
      start = pos = me;
    }
    if (start < text.size()) PKV_RETURN_IF_ERROR(encode_regex(text.substr(start), m, out));
    return Status::Ok();
  }

  void append_token_bytes(int32_t id, std::string* out) const override {
    const std::string& t = tokens_[size_t(id)];
    const ByteMap& bm = byte_map();
    const unsigned char* s = reinterpret_cast<const unsigned char*>(t.data());
    size_t i = 0;
    while (i < t.size()) {
      int l = utf8_sequence_length(s + i, t.size() - i);
      if (l <= 0) l = 1;
      uint32_t cp = l == 1 ? s[i] : l == 2 ? ((s[i] & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu) : UINT32_MAX;
      auto it = bm.decode.find(cp);
      if (it != bm.decode.end()) {
        out->push_back(char(it->second));
      } else {
        out->append(t, i, size_t(l));  // not in the byte alphabet: keep the text as is
      }
      i += size_t(l);
    }
  }

 private:
  static Status compile(const char* pattern, pcre2_code** out) {
    int err = 0;
    PCRE2_SIZE off = 0;
    *out = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                         &off, nullptr);
    if (!*out) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return make_error(StatusCode::kInternal, "tokenizer regex failed to compile at %zu: %s", size_t(off),
                        reinterpret_cast<const char*>(msg));
    }
    return Status::Ok();
  }

  // Next match of re in text at or after pos. The input was validated as UTF-8 already.
  static bool next_match(pcre2_code* re, pcre2_match_data* m, std::string_view text, size_t pos, size_t* ms,
                         size_t* me) {
    const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, PCRE2_NO_UTF_CHECK,
                               m, nullptr);
    if (rc < 0) return false;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m);
    *ms = ov[0];
    *me = ov[1];
    return *me > *ms;
  }

  Status encode_regex(std::string_view text, pcre2_match_data* m, std::vector<int32_t>* out) const {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t ms = 0, me = 0;
      if (!next_match(re_, m, text, pos, &ms, &me)) {
        PKV_RETURN_IF_ERROR(encode_word(text.substr(pos), out));
        break;
      }
      if (ms > pos) PKV_RETURN_IF_ERROR(encode_word(text.substr(pos, ms - pos), out));
      PKV_RETURN_IF_ERROR(encode_word(text.substr(ms, me - ms), out));
      pos = me;
    }
    return Status::Ok();
  }

  // BPE over one pre-token: start from the mapped bytes, repeatedly merge the adjacent pair
  // of lowest rank (leftmost on ties) until no pair is in the merge table.
  Status encode_word(std::string_view word, std::vector<int32_t>* out) const {
    const ByteMap& bm = byte_map();
    std::vector<std::string> sym;
    sym.reserve(word.size());
    for (unsigned char c : word) sym.push_back(bm.encoded[c]);
    std::string key;
    while (sym.size() > 1) {
      int32_t best_rank = INT32_MAX;
      size_t best = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        key.assign(sym[i]).append(1, ' ').append(sym[i + 1]);
        auto it = ranks_.find(key);
        if (it != ranks_.end() && it->second < best_rank) {
          best_rank = it->second;
          best = i;
        }
      }
      if (best_rank == INT32_MAX) break;
      // Merge every occurrence of the best pair, left to right.
      const std::string a = sym[best], b = sym[best + 1];
      std::vector<std::string> next;
      next.reserve(sym.size());
      for (size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size() && sym[i] == a && sym[i + 1] == b) {
          next.push_back(a + b);
          ++i;
        } else {
          next.push_back(sym[i]);
        }
      }
      sym.swap(next);
    }
    for (const std::string& s : sym) {
      auto it = ids_.find(s);
      if (it != ids_.end()) {
        out->push_back(it->second);
        continue;
      }
      // A merged symbol missing from the vocabulary: fall back to its single bytes. A byte
      // with no token at all is dropped, as HF tokenizers' BPE (no unk token) does: SmolLM2's
      // vocabulary lacks e.g. 0x04 and the lead bytes 0xF1/0xF2.
      for (size_t i = 0; i < s.size();) {
        const int l = utf8_sequence_length(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
        const std::string ch = s.substr(i, size_t(l > 0 ? l : 1));
        auto jt = ids_.find(ch);
        if (jt != ids_.end()) out->push_back(jt->second);
        i += ch.size();
      }
    }
    return Status::Ok();
  }

  bool split_digits_ = false;
  pcre2_code* re_ = nullptr;
  pcre2_code* digit_re_ = nullptr;
  std::unordered_map<std::string, int32_t> ranks_;
};

}  // namespace

Status make_bpe_tokenizer(const TokenizerData& d, std::unique_ptr<Tokenizer>* out) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  PKV_RETURN_IF_ERROR(t->init(d));
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace phasekv
