// SentencePiece-style BPE (GGUF "llama" vocabularies): spaces become U+2581 "▁", an
// optional "▁" is prepended, then adjacent symbols merge while their concatenation is in
// the vocabulary, highest score first (leftmost on ties). Symbols left without a token
// become byte-fallback tokens <0xXX>, or the unknown token.
#include <algorithm>
#include <cmath>
#include <cstdint>
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
      // A NaN score would make "highest score" depend on the order pairs are looked at.
      if (std::isnan(scores_[i]))
        return make_error(StatusCode::kInvalidFile, "tokenizer.scores[%zu] (token '%s') is NaN", i,
                          d.tokens[i].c_str());
      const std::string& t = d.tokens[i];
      max_token_text_ = std::max(max_token_text_, t.size());
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
  // The merge loop of SentencePiece's BPE model (and llama.cpp's llm_tokenizer_spm): while
  // some adjacent pair of symbols concatenates to a vocabulary text, merge the pair whose
  // token has the highest score, the leftmost of equal scores, one pair at a time. The
  // symbols are spans of one string in a linked list; the candidate pairs sit in a heap
  // ordered by (score desc, left position asc).
  //
  // Why the result is the plain loop's (rescan every pair, take the first of the highest
  // score; PhaseKV's encoder before the heap), merge for merge: a symbol keeps its start
  // and only grows, so a pair whose left symbol died or whose two spans no longer measure
  // `size` has changed for good and never becomes valid again; such stale entries are
  // skipped when popped. Every pair present has an entry: the first ones are pushed at the
  // start, and a merge changes only the two pairs around the new symbol, which are pushed.
  // So the first valid pop is the best pair present, leftmost on ties (positions grow left
  // to right). Scores compare as floats, as in the plain loop; init refuses NaN, with which
  // the plain loop's choice depended on scan order and no ordering reproduces it.
  Status encode_plain(std::string_view text, std::vector<int32_t>* out) const override {
    std::string s;  // the text with spaces as "▁", after the optional prefix
    s.reserve(text.size() + 3);
    if (add_space_prefix_) s += kSpace;
    for (char c : text) {
      if (c == ' ') s += kSpace;
      else s += c;
    }
    std::vector<Symbol> sym;  // [characters of s]
    sym.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      int l = utf8_sequence_length(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
      if (l <= 0) l = 1;
      const size_t k = sym.size();
      sym.push_back(Symbol{i, size_t(l), k == 0 ? kNone : k - 1, kNone});
      if (k > 0) sym[k - 1].next = k;
      i += size_t(l);
    }
    std::string key;
    std::vector<Pair> heap;  // candidate pairs, a heap ordered by (score desc, left asc)
    heap.reserve(sym.size());
    // The pair (sym[i], its right neighbour) if its text is a token.
    auto push_pair = [&](size_t i) {
      const size_t size = sym[i].len + sym[sym[i].next].len;
      if (size > max_token_text_) return;
      key.assign(s, sym[i].off, size);
      auto it = ids_.find(key);
      if (it == ids_.end()) return;
      heap.push_back(Pair{scores_[size_t(it->second)], i, size});
      std::push_heap(heap.begin(), heap.end(), Later());
    };
    for (size_t i = 0; i + 1 < sym.size(); ++i) push_pair(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), Later());
      const Pair top = heap.back();
      heap.pop_back();
      Symbol& a = sym[top.left];
      if (a.len == 0 || a.next == kNone || a.len + sym[a.next].len != top.size) continue;  // stale
      Symbol& b = sym[a.next];
      a.len += b.len;
      b.len = 0;
      a.next = b.next;
      if (a.next != kNone) sym[a.next].prev = top.left;
      if (a.prev != kNone) push_pair(a.prev);
      if (a.next != kNone) push_pair(top.left);
    }
    for (size_t i = sym.empty() ? kNone : 0; i != kNone; i = sym[i].next) {
      key.assign(s, sym[i].off, sym[i].len);
      auto it = ids_.find(key);
      if (it != ids_.end() && !special_[size_t(it->second)]) {
        out->push_back(it->second);
        continue;
      }
      for (unsigned char c : key) {
        if (byte_ids_[c] >= 0) {
          out->push_back(byte_ids_[c]);
        } else if (unk_ >= 0) {
          out->push_back(unk_);
          break;
        } else {
          return make_error(StatusCode::kInvalidArgument,
                            "tokenizer: '%s' has no token, no byte fallback and no unknown token", key.c_str());
        }
      }
    }
    return Status::Ok();
  }

  // A token stands for at most its stored text: each "▁" in it came from a space (1 byte), a
  // literal U+2581 (3 bytes) or the prefix (none). The unknown token stands for one
  // character (at most 4 bytes) or what is left of a special's text (at most that text).
  size_t covered_bytes_bound(int32_t id) const override {
    return std::max(tokens_[size_t(id)].size(), id == unk_ ? size_t(4) : size_t(0));
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
  // One symbol: a span of the text being merged, linked to its neighbours (len 0 once
  // absorbed into its left neighbour).
  struct Symbol {
    size_t off, len;
    size_t prev, next;  // kNone at the ends
  };
  // A candidate merge: the symbol starting at `left` with its right neighbour, whose spans
  // measured `size` bytes together when the pair was found; `score` is its token's.
  struct Pair {
    float score;
    size_t left, size;
  };
  static constexpr size_t kNone = SIZE_MAX;
  // Higher score first, then leftmost: the "less urgent" relation for std::push_heap.
  // (A type, not a function pointer, so that the heap operations inline it.)
  struct Later {
    bool operator()(const Pair& a, const Pair& b) const {
      return a.score != b.score ? a.score < b.score : a.left > b.left;
    }
  };

  std::vector<float> scores_;
  bool add_space_prefix_ = false;
  int32_t unk_ = -1;
  int32_t byte_ids_[256];
  size_t max_token_text_ = 0;  // longest token text: longer pairs need no lookup
};

}  // namespace

Status make_spm_tokenizer(const TokenizerData& d, std::unique_ptr<Tokenizer>* out) {
  std::unique_ptr<SpmTokenizer> t(new SpmTokenizer());
  PKV_RETURN_IF_ERROR(t->init(d));
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace phasekv
