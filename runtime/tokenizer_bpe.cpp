// Byte-level BPE (GPT-2 style) with the model's pre-tokenizer.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <cstdint>
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
      max_merge_bytes_ = std::max(max_merge_bytes_, m.size());
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
    Scratch w;
    if (!split_digits_) return encode_regex(text, m, w, out);
    // Digits(individual_digits): every \p{N} character is a piece of its own.
    size_t start = 0, pos = 0;
    while (pos < text.size()) {
      size_t ms = 0, me = 0;
      if (!next_match(digit_re_, m, text, pos, &ms, &me)) break;
      if (ms > start) PKV_RETURN_IF_ERROR(encode_regex(text.substr(start, ms - start), m, w, out));
      PKV_RETURN_IF_ERROR(encode_regex(text.substr(ms, me - ms), m, w, out));
      start = pos = me;
    }
    if (start < text.size()) PKV_RETURN_IF_ERROR(encode_regex(text.substr(start), m, w, out));
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

  // A token stands for exactly its decoded bytes (a special for its text): encode emits a
  // token for a symbol whose text, through the byte map, is that token's text.
  size_t covered_bytes_bound(int32_t id) const override {
    std::string b;
    (void)token_bytes(id, &b);
    return b.size();
  }
  // A byte whose mapped character has no token is dropped by encode_word's fallback.
  bool byte_dropped(uint8_t b) const override { return ids_.find(byte_map().encoded[b]) == ids_.end(); }

 private:
  // One symbol of the word being merged: a span of the mapped text, linked to its neighbours.
  // A symbol absorbed into its left neighbour gets len 0.
  struct Symbol {
    size_t off, len;
    size_t prev, next;  // kNone at the ends
  };
  // A candidate merge: the symbol starting at `left` with its right neighbour, whose spans
  // measured `size` bytes together when the pair was found.
  struct Pair {
    int32_t rank;
    size_t left, size;
  };
  static constexpr size_t kNone = SIZE_MAX;

  // Per-encode buffers, reused word after word.
  struct Scratch {
    std::string text;            // the word's bytes through the GPT-2 byte map
    std::string key;             // "left right" for the merge table, or a symbol's text
    std::vector<Symbol> sym;     // [initial symbols of the word]
    std::vector<Pair> heap;      // candidate pairs, a heap ordered by (rank, left)
    std::vector<Pair> pending;   // pairs found during the current rank's pass
  };

  // Lower rank first, then leftmost: the "less urgent" relation for std::push_heap.
  // (A type, not a function pointer, so that the heap operations inline it.)
  struct Later {
    bool operator()(const Pair& a, const Pair& b) const { return a.rank != b.rank ? a.rank > b.rank : a.left > b.left; }
  };

  // Is the pair still in the word as it was found? A symbol keeps its start and only grows,
  // so a pair that changed never comes back.
  static bool current(const Scratch& w, const Pair& p) {
    const Symbol& a = w.sym[p.left];
    return a.len != 0 && a.next != kNone && a.len + w.sym[a.next].len == p.size;
  }

  // The pair (sym[i], its right neighbour) if the merge table has it.
  bool find_pair(Scratch& w, size_t i, Pair* p) const {
    const Symbol& a = w.sym[i];
    const Symbol& b = w.sym[a.next];
    if (a.len + 1 + b.len > max_merge_bytes_) return false;
    w.key.assign(w.text, a.off, a.len).append(1, ' ').append(w.text, b.off, b.len);
    auto it = ranks_.find(w.key);
    if (it == ranks_.end()) return false;
    *p = Pair{it->second, i, a.len + b.len};
    return true;
  }

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

  Status encode_regex(std::string_view text, pcre2_match_data* m, Scratch& w, std::vector<int32_t>* out) const {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t ms = 0, me = 0;
      if (!next_match(re_, m, text, pos, &ms, &me)) {
        PKV_RETURN_IF_ERROR(encode_word(text.substr(pos), w, out));
        break;
      }
      if (ms > pos) PKV_RETURN_IF_ERROR(encode_word(text.substr(pos, ms - pos), w, out));
      PKV_RETURN_IF_ERROR(encode_word(text.substr(ms, me - ms), w, out));
      pos = me;
    }
    return Status::Ok();
  }

  // BPE over one pre-token, with exactly the result of the GPT-2 reference loop (openai
  // encoder.py bpe(), PhaseKV's encoder before the heap): while some adjacent pair is in the
  // merge table, take the pair of lowest rank and merge every occurrence of it, left to
  // right (a run "a a a" of the pair (a, a) becomes "aa a"). That loop rescans the word
  // for every rank it merges: quadratic on long words. Here the symbols are spans of one
  // string in a linked list and the candidate pairs sit in a heap ordered by (rank, left
  // position); the pass of one rank pops that rank's pairs left to right.
  //
  // Why the result is the reference's, merge for merge:
  //  * Each rank belongs to one pair of texts (symbols never hold a raw ' ': the byte map
  //    sends 0x20 to "Ġ", so "left right" splits one way), so the reference's "pair of
  //    lowest rank" is the heap's lowest rank, and the leftmost of its occurrences is the
  //    lowest position of that rank.
  //  * Lazy invalidation: a symbol keeps its start and only grows, so a pair whose left
  //    symbol died or whose two spans no longer measure `size` has changed for good; it is
  //    skipped when popped and can never be valid again. Every pair present in the word has
  //    an entry: the first ones are pushed at the start, and a merge changes only the two
  //    pairs around the new symbol, which are pushed. So the first valid pop is the best
  //    pair present, leftmost on ties.
  //  * A merge of (a, b) never creates another (a, b): the new symbol ab is longer than a and
  //    than b. So popping rank r's entries in position order visits the occurrences of (a, b)
  //    present when the pass began, left to right; an occurrence overlapping one just merged
  //    (a == b: in "a a a" the pair at the middle a) is stale by then, as the reference's
  //    scan skips it.
  //  * The pairs found during rank r's pass wait in `pending` until the pass is over, as the
  //    reference only looks at them on its next scan. This is where HF tokenizers'
  //    Word::merge_all differs: it pushes them at once, so a new pair whose rank is below r
  //    is merged before the rest of rank r's occurrences. That can change the result only
  //    for a merge list in which some merge ranks before a merge that makes one of its parts
  //    (e.g. "ab a" before "a b": "abab" is "ab ab" here and in GPT-2's bpe(), "aba b" in
  //    HF). Lists learned by BPE training never do that (a part exists before it is used),
  //    so there both agree; tests/unit/test_tokenizer.cpp checks SmolLM2's list is such.
  Status encode_word(std::string_view word, Scratch& w, std::vector<int32_t>* out) const {
    const ByteMap& bm = byte_map();
    w.text.clear();
    w.sym.clear();
    w.heap.clear();
    w.pending.clear();
    for (unsigned char c : word) {
      const size_t i = w.sym.size();
      w.sym.push_back(Symbol{w.text.size(), bm.encoded[c].size(), i == 0 ? kNone : i - 1, kNone});
      if (i > 0) w.sym[i - 1].next = i;
      w.text += bm.encoded[c];
    }
    Pair p{};
    for (size_t i = 0; i + 1 < w.sym.size(); ++i)
      if (find_pair(w, i, &p)) w.heap.push_back(p);
    std::make_heap(w.heap.begin(), w.heap.end(), Later());
    while (!w.heap.empty()) {
      const int32_t rank = w.heap.front().rank;
      while (!w.heap.empty() && w.heap.front().rank == rank) {
        std::pop_heap(w.heap.begin(), w.heap.end(), Later());
        const Pair top = w.heap.back();
        w.heap.pop_back();
        if (!current(w, top)) continue;  // stale
        Symbol& a = w.sym[top.left];
        Symbol& b = w.sym[a.next];
        a.len += b.len;
        b.len = 0;
        a.next = b.next;
        if (a.next != kNone) w.sym[a.next].prev = top.left;
        if (a.prev != kNone && find_pair(w, a.prev, &p)) w.pending.push_back(p);
        if (a.next != kNone && find_pair(w, top.left, &p)) w.pending.push_back(p);
      }
      for (const Pair& q : w.pending) {
        if (!current(w, q)) continue;  // already changed again in this pass
        w.heap.push_back(q);
        std::push_heap(w.heap.begin(), w.heap.end(), Later());
      }
      w.pending.clear();
    }
    for (size_t i = w.sym.empty() ? kNone : 0; i != kNone; i = w.sym[i].next) {
      w.key.assign(w.text, w.sym[i].off, w.sym[i].len);
      auto it = ids_.find(w.key);
      if (it != ids_.end()) {
        out->push_back(it->second);
        continue;
      }
      // A merged symbol missing from the vocabulary: fall back to its single bytes. A byte
      // with no token at all is dropped, as HF tokenizers' BPE (no unk token) does: SmolLM2's
      // vocabulary lacks e.g. 0x04 and the lead bytes 0xF1/0xF2.
      const std::string_view s(w.text.data() + w.sym[i].off, w.sym[i].len);
      for (size_t j = 0; j < s.size();) {
        const int l = utf8_sequence_length(reinterpret_cast<const unsigned char*>(s.data()) + j, s.size() - j);
        const size_t n = size_t(l > 0 ? l : 1);
        w.key.assign(s.data() + j, n);
        auto jt = ids_.find(w.key);
        if (jt != ids_.end()) out->push_back(jt->second);
        j += n;
      }
    }
    return Status::Ok();
  }

  bool split_digits_ = false;
  pcre2_code* re_ = nullptr;
  pcre2_code* digit_re_ = nullptr;
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> rank; the first of duplicates wins
  size_t max_merge_bytes_ = 0;                     // longest "left right": longer pairs need no lookup
};

}  // namespace

Status make_bpe_tokenizer(const TokenizerData& d, std::unique_ptr<Tokenizer>* out) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  PKV_RETURN_IF_ERROR(t->init(d));
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace phasekv
