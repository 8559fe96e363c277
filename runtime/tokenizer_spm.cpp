// SentencePiece-style BPE (GGUF "llama" vocabularies): spaces become U+2581 "▁", an
// optional "▁" is prepended, then adjacent symbols merge while their concatenation is in
// the vocabulary, highest score first (leftmost on ties). Symbols left without a token
// become byte-fallback tokens <0xXX>, or the unknown token.
#include <cstdio>

#include "tokenizer.h"

namespace phasekv {

namespace {

const char kSpace[] = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public Tokenizer {
 public:
  Status init(const TokenizerData& d) {
    scores_ = d.scores;
    if (scores_.size() != d.tokens.size())
      return make_error(StatusCode::kInvalidFile, "tokenizer.scores has %zu entries for %zu tokens", scores_.size(),
                        d.tokens.size());
    add_space_prefix_ = d.add_space_prefix;
    unk_ = d.unk_id;
    for (int b = 0; b < 256; ++b) byte_ids_[b] = -1;
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      const std::string& t = d.tokens[i];
      unsigned v = 0;
      char check[8];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && std::sscanf(t.c_str() + 3, "%2X", &v) == 1) {
        std::snprintf(check, sizeof check, "<0x%02X>", v);
        if (t == check && byte_ids_[v] < 0) byte_ids_[v] = int32_t(i);
      }
    }
    return Status::Ok();
  }

 protected:
  Status encode_plain(std::string_view text, std::vector<int32_t>* out) const override {
    std::string s;
    if (add_space_prefix_) s += kSpace;
    for (char c : text) {
      if (c == ' ') s += kSpace;
      else s += c;
    }
    std::vector<std::string> sym;
    for (size_t i = 0; i < s.size();) {
      int l = utf8_sequence_length(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
      if (l <= 0) l = 1;
      sym.push_back(s.substr(i, size_t(l)));
      i += size_t(l);
    }
    while (sym.size() > 1) {
      float best_score = 0;
      size_t best = SIZE_MAX;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = ids_.find(sym[i] + sym[i + 1]);
        if (it == ids_.end()) continue;
        const float sc = scores_[size_t(it->second)];
        if (best == SIZE_MAX || sc > best_score) {
          best_score = sc;
          best = i;
        }
      }
      if (best == SIZE_MAX) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + long(best) + 1);
    }
    for (const std::string& x : sym) {
      auto it = ids_.find(x);
      if (it != ids_.end() && !special_[size_t(it->second)]) {
        out->push_back(it->second);
        continue;
      }
      for (unsigned char c : x) {
        if (byte_ids_[c] >= 0) {
          out->push_back(byte_ids_[c]);
        } else if (unk_ >= 0) {
          out->push_back(unk_);
          break;
        } else {
          return make_error(StatusCode::kInvalidArgument,
                            "tokenizer: '%s' has no token, no byte fallback and no unknown token", x.c_str());
        }
      }
    }
    return Status::Ok();
  }

  void append_token_bytes(int32_t id, std::string* out) const override {
    const std::string& t = tokens_[size_t(id)];
    unsigned v = 0;
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::sscanf(t.c_str() + 3, "%2X", &v) == 1) {
      out->push_back(char(v));
      return;
    }
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, kSpace) == 0) {
        out->push_back(' ');
        i += 3;
      } else {
        out->push_back(t[i++]);
      }
    }
  }

 private:
  std::vector<float> scores_;
  bool add_space_prefix_ = false;
  int32_t unk_ = -1;
  int32_t byte_ids_[256];
};

}  // namespace

Status make_spm_tokenizer(const TokenizerData& d, std::unique_ptr<Tokenizer>* out) {
  std::unique_ptr<SpmTokenizer> t(new SpmTokenizer());
  PKV_RETURN_IF_ERROR(t->init(d));
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace phasekv
