// Tokenizers: SmolLM2's byte-level BPE against HF `tokenizers` on a generated corpus
// (tests/reference/make_tokenizer_corpus.py + tokenizer_ref.py), the streaming decoder,
// hand-derived cases, and the heap merges against the quadratic loops they replaced (kept
// below as the reference) on random vocabularies, random texts and 400 KB words.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string_view>
#include <unordered_map>

#include "engine_util.h"

using namespace phasekv;
using namespace phasekv::test;

TEST_CASE("byte-level BPE: ids identical to HF tokenizers on the corpus and decode(encode(x)) == x") {
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF (configure with -DPHASEKV_TEST_MODEL=PATH)");
    return;
  }
  const nlohmann::json j = load_json_file(data_dir() + "/tokenizer_ref.json");
  std::set<size_t> lossy;
  for (const auto& i : j["lossy_cases"]) lossy.insert(i.get<size_t>());
  const auto& cases = j["cases"];
  REQUIRE(cases.size() >= 2000);
  size_t same = 0, round_trip = 0, tokens = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i]["text"];
    const std::vector<int32_t> ref = cases[i]["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> ids;
    Status s = m->tokenizer().encode(text, true, &ids);
    REQUIRE_MESSAGE(s.ok(), s.to_string());
    if (ids == ref) {
      ++same;
    } else if (i - same < 5) {
      MESSAGE("case " << i << " differs: '" << text.substr(0, 80) << "'");
    }
    tokens += ids.size();
    std::string back;
    REQUIRE(m->tokenizer().decode(ids, &back).ok());
    if (!lossy.count(i)) round_trip += back == text;
  }
  MESSAGE(cases.size() << " corpus strings, " << tokens << " tokens; " << lossy.size()
                       << " contain bytes SmolLM2's vocabulary lacks (dropped, as HF does)");
  CHECK(same == cases.size());
  CHECK(round_trip == cases.size() - lossy.size());
}

TEST_CASE("byte-level BPE, Qwen2 pre-tokenizer: ids identical to HF tokenizers on the corpus") {
  // SmolLM2's vocabulary and merges with tokenizer.pre = "qwen2", against HF tokenizers
  // configured like Qwen2.5's / Qwen3's tokenizer.json (tokenizer_ref.py --pre qwen2).
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  TokenizerData d = m->spec().tokenizer;
  d.pre = "qwen2";
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(d, &t).ok());
  const nlohmann::json j = load_json_file(data_dir() + "/tokenizer_ref_qwen2.json");
  const auto& cases = j["cases"];
  REQUIRE(cases.size() >= 2000);
  size_t same = 0, differs_from_smollm = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i]["text"];
    const std::vector<int32_t> ref = cases[i]["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> ids, smollm;
    REQUIRE(t->encode(text, true, &ids).ok());
    REQUIRE(m->tokenizer().encode(text, true, &smollm).ok());
    differs_from_smollm += smollm != ids;
    if (ids == ref) {
      ++same;
    } else if (i - same < 5) {
      MESSAGE("case " << i << " differs: '" << text.substr(0, 80) << "'");
    }
  }
  MESSAGE(cases.size() << " corpus strings; " << differs_from_smollm << " tokenize differently from SmolLM2's pre-tokenizer");
  CHECK(same == cases.size());
  CHECK(differs_from_smollm > 0);  // the pattern is really in use
}

TEST_CASE("byte-level BPE: known ids and special-token handling") {
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  const Tokenizer& t = m->tokenizer();
  std::vector<int32_t> ids;
  REQUIRE(t.encode("<|im_start|>user\nhi<|im_end|>\n", true, &ids).ok());
  CHECK(ids == std::vector<int32_t>{1, 4093, 198, 6004, 2, 198});
  ids.clear();
  // Without parse_special the markers are plain text (user content must not inject specials).
  REQUIRE(t.encode("<|im_start|>", false, &ids).ok());
  CHECK(ids.size() > 1);
  CHECK(std::find(ids.begin(), ids.end(), 1) == ids.end());
  ids.clear();
  REQUIRE(t.encode(" 123", false, &ids).ok());
  CHECK(ids == std::vector<int32_t>{216, 33, 34, 35});
  ids.clear();
  REQUIRE(t.encode("", false, &ids).ok());
  CHECK(ids.empty());
}

TEST_CASE("streaming decode never emits a broken UTF-8 character") {
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  const Tokenizer& t = m->tokenizer();
  const std::string text = "Robots 🤖🦾 say 日本語 and emoji 👩‍👩‍👧‍👦!";
  std::vector<int32_t> ids;
  REQUIRE(t.encode(text, false, &ids).ok());
  StreamDecoder d(t);
  std::string all;
  size_t partial_pieces = 0;
  for (int32_t id : ids) {
    std::string raw, piece;
    REQUIRE(t.token_bytes(id, &raw).ok());
    if (utf8_first_invalid(raw) >= 0) ++partial_pieces;  // this token alone is a fragment
    REQUIRE(d.push(id, &piece).ok());
    CHECK(utf8_first_invalid(piece) == -1);
    all += piece;
  }
  d.flush(&all);
  CHECK(partial_pieces > 0);  // the test does exercise split characters
  CHECK(all == text);

  // A lone continuation byte can never become valid: it turns into U+FFFD at once.
  int32_t cont = -1;
  std::string raw;
  for (int32_t id = 0; id < t.n_tokens() && cont < 0; ++id) {
    REQUIRE(t.token_bytes(id, &raw).ok());
    if (raw == "\x80") cont = id;
  }
  REQUIRE(cont >= 0);
  StreamDecoder d2(t);
  std::string out;
  REQUIRE(d2.push(cont, &out).ok());
  CHECK(out == "\xEF\xBF\xBD");
  // An unfinished character is held back, then replaced at flush.
  std::vector<int32_t> rocket;
  REQUIRE(t.encode("🚀", false, &rocket).ok());
  if (rocket.size() > 1) {
    StreamDecoder d3(t);
    std::string o3;
    REQUIRE(d3.push(rocket[0], &o3).ok());
    CHECK(o3.empty());
    d3.flush(&o3);
    CHECK(o3 == "\xEF\xBF\xBD");
  }
}

TEST_CASE("utf8 validation: hand-made sequences") {
  CHECK(utf8_first_invalid("plain ascii") == -1);
  CHECK(utf8_first_invalid("\xE6\x97\xA5\xF0\x9F\x9A\x80") == -1);
  CHECK(utf8_first_invalid("ab\x80") == 2);          // stray continuation
  CHECK(utf8_first_invalid("a\xC0\xAF") == 1);       // overlong
  CHECK(utf8_first_invalid("\xED\xA0\x80") == 0);    // surrogate
  CHECK(utf8_first_invalid("\xF4\x90\x80\x80") == 0);  // > U+10FFFF
  CHECK(utf8_first_invalid("ok\xE6\x97") == 2);      // truncated at the end
}

TEST_CASE("SentencePiece BPE: hand-derived merges by score, byte fallback, spaces") {
  TokenizerData d;
  d.type = TokenizerType::SentencePiece;
  d.model = "llama";
  d.add_space_prefix = true;
  // ids: 0 <unk> 1 <s> 2 </s> 3 ▁ 4 h 5 e 6 l 7 o 8 ▁h 9 ll 10 he 11 ▁he 12 llo 13 ▁hello
  d.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "h", "e", "l", "o", "\xE2\x96\x81h", "ll", "he",
              "\xE2\x96\x81he", "llo", "\xE2\x96\x81hello"};
  d.scores = {0, 0, 0, -1, -1, -1, -1, -1, -2, -3, -4, -5, -6, -7};
  d.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    d.tokens.push_back(name);
    d.scores.push_back(0);
    d.token_types.push_back(6);
  }
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(d, &t).ok());
  std::vector<int32_t> ids;
  // "hello" -> "▁hello": ▁+h (score -2) first, then l+l (-3), then ▁h+e (-5), then ll+o (-6),
  // then ▁he+llo -> ▁hello (-7).
  REQUIRE(t->encode("hello", false, &ids).ok());
  CHECK(ids == std::vector<int32_t>{13});
  ids.clear();
  // "hex": ▁he then x has no token -> byte fallback <0x78> (id 14 + 0x78).
  REQUIRE(t->encode("hex", false, &ids).ok());
  CHECK(ids == std::vector<int32_t>{11, 14 + 0x78});
  std::string back;
  REQUIRE(t->decode(ids, &back).ok());
  CHECK(back == " hex");  // the prefix space comes back; callers strip it if they want
}

TEST_CASE("Tokenizer::create refuses special ids outside the vocabulary (fuzz find)") {
  TokenizerData d;
  d.type = TokenizerType::SentencePiece;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>", "a"};
  d.scores = {0, 0, 0, -1};
  d.token_types = {2, 3, 3, 1};
  d.unk_id = 0;
  d.eos_id = 2;
  std::unique_ptr<Tokenizer> t;
  d.bos_id = 4;  // one past the last id: encode with add_bos would emit it
  Status s = Tokenizer::create(d, &t);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("tokenizer.bos_id = 4 is outside the vocabulary [0, 4)") != std::string::npos);
  CHECK(t == nullptr);
  d.bos_id = -2;
  CHECK(!Tokenizer::create(d, &t).ok());
  d.bos_id = 1;
  d.unk_id = 2097152;
  CHECK(Tokenizer::create(d, &t).message().find("tokenizer.unk_id = 2097152") != std::string::npos);
  d.unk_id = 0;
  REQUIRE(Tokenizer::create(d, &t).ok());  // -1 ("none") and ids inside are fine
}

// ---------------------------------------------------------------------------------------
// The merge loops as they were before the heap merges (quadratic), kept here as the
// reference the tokenizers must match token for token: GPT-2's bpe() loop for byte-level
// BPE, the rescan-every-pair loop for SentencePiece, and encode's special-token scan that
// compared every special at every byte. For short texts only.
namespace ref {

std::vector<std::string> gpt2_byte_texts() {
  std::vector<std::string> out(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const unsigned cp = printable ? unsigned(b) : unsigned(256 + n++);
    if (cp < 0x80) out[size_t(b)] = std::string(1, char(cp));
    else out[size_t(b)] = std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  return out;
}

struct Bpe {
  std::unordered_map<std::string, int32_t> ranks, ids;
  std::vector<std::string> byte_text = gpt2_byte_texts();
  explicit Bpe(const TokenizerData& d) {
    for (size_t i = 0; i < d.merges.size(); ++i) ranks.emplace(d.merges[i], int32_t(i));
    for (size_t i = 0; i < d.tokens.size(); ++i) ids.emplace(d.tokens[i], int32_t(i));
  }
  // BpeTokenizer::encode_word before the heap.
  void word(std::string_view word, std::vector<int32_t>* out) const {
    std::vector<std::string> sym;
    for (unsigned char c : word) sym.push_back(byte_text[c]);
    std::string key;
    while (sym.size() > 1) {
      int32_t best_rank = INT32_MAX;
      size_t best = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        key.assign(sym[i]).append(1, ' ').append(sym[i + 1]);
        auto it = ranks.find(key);
        if (it != ranks.end() && it->second < best_rank) {
          best_rank = it->second;
          best = i;
        }
      }
      if (best_rank == INT32_MAX) break;
      const std::string a = sym[best], b = sym[best + 1];
      std::vector<std::string> next;
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
      auto it = ids.find(s);
      if (it != ids.end()) {
        out->push_back(it->second);
        continue;
      }
      for (size_t i = 0; i < s.size();) {
        const int l = utf8_sequence_length(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
        const std::string ch = s.substr(i, size_t(l > 0 ? l : 1));
        auto jt = ids.find(ch);
        if (jt != ids.end()) out->push_back(jt->second);
        i += ch.size();
      }
    }
  }
  // Words (letters only) joined by single spaces: the GPT-2 pre-tokenizer's pieces are the
  // first word and " word" for each next one.
  std::vector<int32_t> words(const std::string& text) const {
    std::vector<int32_t> out;
    size_t start = 0;
    for (size_t i = 1; i <= text.size(); ++i) {
      if (i == text.size() || text[i] == ' ') {
        word(std::string_view(text).substr(start, i - start), &out);
        start = i;
      }
    }
    return out;
  }
};

struct Spm {
  std::unordered_map<std::string, int32_t> ids;
  std::vector<float> scores;
  std::vector<bool> special;
  int32_t byte_ids[256];
  int32_t unk;
  bool add_space_prefix;
  explicit Spm(const TokenizerData& d) : scores(d.scores), unk(d.unk_id), add_space_prefix(d.add_space_prefix) {
    special.assign(d.tokens.size(), false);
    for (int b = 0; b < 256; ++b) byte_ids[b] = -1;
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      const std::string& t = d.tokens[i];
      ids.emplace(t, int32_t(i));
      const int32_t type = i < d.token_types.size() ? d.token_types[i] : 1;
      special[i] = (type == 3 || type == 4) && !t.empty();
      unsigned v = 0;
      char check[8];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && std::sscanf(t.c_str() + 3, "%2X", &v) == 1) {
        std::snprintf(check, sizeof check, "<0x%02X>", v);
        if (t == check && byte_ids[v] < 0) byte_ids[v] = int32_t(i);
      }
    }
  }
  // SpmTokenizer::encode_plain before the heap.
  Status encode(std::string_view text, std::vector<int32_t>* out) const {
    std::string s;
    if (add_space_prefix) s += "\xE2\x96\x81";
    for (char c : text) {
      if (c == ' ') s += "\xE2\x96\x81";
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
        auto it = ids.find(sym[i] + sym[i + 1]);
        if (it == ids.end()) continue;
        const float sc = scores[size_t(it->second)];
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
      auto it = ids.find(x);
      if (it != ids.end() && !special[size_t(it->second)]) {
        out->push_back(it->second);
        continue;
      }
      for (unsigned char c : x) {
        if (byte_ids[c] >= 0) {
          out->push_back(byte_ids[c]);
        } else if (unk >= 0) {
          out->push_back(unk);
          break;
        } else {
          return make_error(StatusCode::kInvalidArgument,
                            "tokenizer: '%s' has no token, no byte fallback and no unknown token", x.c_str());
        }
      }
    }
    return Status::Ok();
  }
};

// Tokenizer::encode_impl's special-token scan before the first-byte filter (valid UTF-8
// assumed); `plain` encodes the runs between specials.
template <class Plain>
Status special_scan(const TokenizerData& d, std::string_view text, const std::vector<uint8_t>* special_ok,
                    Plain plain, std::vector<int32_t>* out) {
  std::vector<int32_t> by_length;
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    const int32_t type = i < d.token_types.size() ? d.token_types[i] : 1;
    if ((type == 3 || type == 4) && !d.tokens[i].empty()) by_length.push_back(int32_t(i));
  }
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](int32_t a, int32_t b) { return d.tokens[size_t(a)].size() > d.tokens[size_t(b)].size(); });
  size_t start = 0, i = 0;
  while (i < text.size()) {
    int32_t hit = -1;
    for (int32_t id : by_length) {
      const std::string& s = d.tokens[size_t(id)];
      if (text.compare(i, s.size(), s) == 0) {
        if (special_ok && std::find(special_ok->begin() + std::ptrdiff_t(i),
                                    special_ok->begin() + std::ptrdiff_t(i + s.size()), 0) !=
                              special_ok->begin() + std::ptrdiff_t(i + s.size()))
          continue;
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > start) PKV_RETURN_IF_ERROR(plain(text.substr(start, i - start), out));
    out->push_back(hit);
    i += d.tokens[size_t(hit)].size();
    start = i;
  }
  if (start < text.size()) PKV_RETURN_IF_ERROR(plain(text.substr(start), out));
  return Status::Ok();
}

}  // namespace ref

namespace {

const std::string kG = "\xC4\xA0";        // "Ġ": a space through the GPT-2 byte map
const std::string kLow = "\xE2\x96\x81";  // "▁"

TokenizerData bpe_data(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  TokenizerData d;
  d.type = TokenizerType::ByteLevelBPE;
  d.model = "gpt2";
  d.pre = "gpt2";
  d.tokens = tokens;
  d.token_types.assign(tokens.size(), 1);
  d.merges = merges;
  return d;
}

// A byte-level BPE vocabulary over a, b, c and "Ġ": random merges of the symbols made so far
// (short ones more often, so that texts merge a lot). `shuffled` puts the merges in random
// order, so that a merge may rank before the one that makes its part (where GPT-2's loop
// and HF's heap differ). Some merge results, and sometimes "c", are left out of the
// vocabulary, for the fallback paths.
TokenizerData random_bpe_vocab(std::mt19937& rng, bool shuffled) {
  std::vector<std::string> sym = {"a", "b", "c", kG};
  std::vector<std::string> merges;
  std::set<std::string> seen;
  const int n = 8 + int(rng() % 40);
  for (int k = 0; k < n; ++k) {
    const std::string x = sym[std::min(rng() % sym.size(), rng() % sym.size())];
    const std::string y = sym[std::min(rng() % sym.size(), rng() % sym.size())];
    if (!seen.insert(x + " " + y).second) continue;
    merges.push_back(x + " " + y);
    if (std::find(sym.begin(), sym.end(), x + y) == sym.end()) sym.push_back(x + y);
  }
  if (shuffled) std::shuffle(merges.begin(), merges.end(), rng);
  std::vector<std::string> tokens;
  for (size_t i = 0; i < sym.size(); ++i) {
    const bool drop = i < 4 ? (sym[i] == "c" && rng() % 4 == 0) : rng() % 8 == 0;
    if (!drop) tokens.push_back(sym[i]);
  }
  return bpe_data(tokens, merges);
}

// Letters from `alphabet` (one byte each, or "é"), in words of 1..max_word joined by single
// spaces.
std::string random_words(std::mt19937& rng, const std::string& alphabet, size_t n_words, size_t max_word,
                         bool with_e_acute = false) {
  std::string s;
  for (size_t w = 0; w < n_words; ++w) {
    if (w) s += ' ';
    const size_t len = 1 + rng() % max_word;
    for (size_t i = 0; i < len; ++i) {
      if (with_e_acute && rng() % 16 == 0) s += "\xC3\xA9";
      else s += alphabet[rng() % alphabet.size()];
    }
  }
  return s;
}

// A SentencePiece vocabulary over "a", "b" and "▁": random pieces of 2..6 units with scores
// from a small set (many ties), a few of them control tokens (merged, then byte fallback),
// byte fallback for most bytes, an unknown token in most vocabularies.
TokenizerData random_spm_vocab(std::mt19937& rng) {
  TokenizerData d;
  d.type = TokenizerType::SentencePiece;
  d.model = "llama";
  d.add_space_prefix = rng() % 2 == 0;
  auto add = [&](const std::string& t, float score, int32_t type) {
    d.tokens.push_back(t);
    d.scores.push_back(score);
    d.token_types.push_back(type);
  };
  if (rng() % 4 != 0) {
    d.unk_id = 0;
    add("<unk>", 0, 2);
  }
  d.bos_id = int32_t(d.tokens.size());
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (rng() % 8 != 0) add(name, 0, 6);
  }
  const std::string units[] = {"a", "b", kLow};
  const float scores[] = {-1.0f, -1.5f, -2.0f, -3.0f, -4.0f};
  for (const std::string& u : units)
    if (rng() % 8 != 0) add(u, -5.0f, 1);
  const int n = 10 + int(rng() % 50);
  for (int k = 0; k < n; ++k) {
    std::string t;
    const size_t len = 2 + rng() % 5;
    for (size_t i = 0; i < len; ++i) t += units[rng() % 3];
    add(t, scores[rng() % 5], rng() % 10 == 0 ? 3 : 1);
  }
  return d;
}

std::string random_spm_text(std::mt19937& rng, size_t max_len) {
  const char* units[] = {"a", "b", " ", "a", "b", "\xE2\x96\x81"};
  std::string s;
  const size_t len = rng() % (max_len + 1);
  for (size_t i = 0; i < len; ++i) s += units[rng() % 6];
  return s;
}

std::vector<int32_t> encode_ok(const Tokenizer& t, const std::string& text, bool parse_special = false) {
  std::vector<int32_t> ids;
  Status s = t.encode(text, parse_special, &ids);
  REQUIRE_MESSAGE(s.ok(), s.to_string());
  return ids;
}

std::string decode_ok(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::string s;
  REQUIRE(t.decode(ids, &s).ok());
  return s;
}

// A text of B bytes gives at least ceil(B / max_token_bytes) tokens.
bool within_bound(const Tokenizer& t, size_t bytes, size_t n_tokens) {
  return n_tokens * t.max_token_bytes() >= bytes;
}

}  // namespace

TEST_CASE("byte-level BPE: heap merges equal GPT-2's merge loop on random vocabularies and texts") {
  std::mt19937 rng(20240601);
  size_t texts = 0, tokens = 0, differs_from_bytes = 0;
  for (int v = 0; v < 160; ++v) {
    const TokenizerData d = random_bpe_vocab(rng, /*shuffled=*/v % 2 == 1);
    std::unique_ptr<Tokenizer> t;
    REQUIRE(Tokenizer::create(d, &t).ok());
    const ref::Bpe r(d);
    for (int k = 0; k < 40; ++k) {
      const std::string text = k % 4 == 0 ? random_words(rng, "abc", 1, 64) : random_words(rng, "abc", 1 + rng() % 6, 12);
      const std::vector<int32_t> want = r.words(text);
      const std::vector<int32_t> got = encode_ok(*t, text);
      REQUIRE_MESSAGE(got == want, "vocabulary " << v << ", text '" << text << "'");
      ++texts;
      tokens += got.size();
      differs_from_bytes += got.size() < text.size();
    }
  }
  MESSAGE(texts << " texts, " << tokens << " tokens; " << differs_from_bytes << " texts merged at least once");
  CHECK(differs_from_bytes > texts / 2);
}

TEST_CASE("byte-level BPE: hand-derived merges on a tiny vocabulary (repeated pairs, ranks)") {
  // ids: 0 a, 1 b, 2 aa, 3 aaa, 4 aaaa, 5 ab, 6 abab; ranks: a+a 0, aa+aa 1, aa+a 2, a+b 3, ab+ab 4.
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(bpe_data({"a", "b", "aa", "aaa", "aaaa", "ab", "abab"},
                                     {"a a", "aa aa", "aa a", "a b", "ab ab"}),
                            &t)
              .ok());
  // a a a a a: every a+a left to right -> aa aa a; then aa+aa -> aaaa a; aaaa+a is no merge.
  // (Right to left would give a aaaa.)
  CHECK(encode_ok(*t, "aaaaa") == std::vector<int32_t>{4, 0});
  CHECK(encode_ok(*t, "aaa") == std::vector<int32_t>{3});  // aa a, then aa+a (rank 2)
  CHECK(encode_ok(*t, "aaaa") == std::vector<int32_t>{4});
  CHECK(encode_ok(*t, "abab") == std::vector<int32_t>{6});       // ab ab, then ab+ab
  CHECK(encode_ok(*t, "aabab") == std::vector<int32_t>{2, 1, 5});  // aa b a b -> aa b ab
  CHECK(encode_ok(*t, "b aa") == std::vector<int32_t>{1, 2});  // "Ġ" has no token: dropped, as HF does

  // A merge list where a merge ranks before the one that makes its part ("ab a" before "a b").
  // GPT-2's loop, which PhaseKV keeps, merges every a+b first: "abab" -> ab ab. HF tokenizers'
  // Word::merge_all would merge ab+a as soon as it appears: aba b.
  REQUIRE(Tokenizer::create(bpe_data({"a", "b", "ab", "aba"}, {"ab a", "a b"}), &t).ok());
  CHECK(encode_ok(*t, "abab") == std::vector<int32_t>{2, 2});
  CHECK(encode_ok(*t, "aba") == std::vector<int32_t>{3});

  // Merges whose result has no token: the symbol falls back to its single bytes.
  REQUIRE(Tokenizer::create(bpe_data({"a", "b", "abb"}, {"a b", "ab b"}), &t).ok());
  CHECK(encode_ok(*t, "ab") == std::vector<int32_t>{0, 1});
  CHECK(encode_ok(*t, "abb") == std::vector<int32_t>{2});
}

TEST_CASE("byte-level BPE: 400 KB words encode and decode back, their first 4 KB as the GPT-2 loop gives") {
  // Linear time shows as this test finishing: the loop before the heap took ~48 s on SmolLM2
  // for the random word. No timing is asserted.
  std::mt19937 rng(7);
  std::string run(400000, 'a'), word(400000, ' ');
  for (char& c : word) c = "ab"[rng() % 2];
  auto check = [&](const Tokenizer& t, const TokenizerData& d, const std::string& x) {
    const std::vector<int32_t> ids = encode_ok(t, x);
    CHECK(decode_ok(t, ids) == x);
    CHECK(within_bound(t, x.size(), ids.size()));
    const std::string prefix = x.substr(0, 4096);
    std::vector<int32_t> want;
    ref::Bpe(d).word(prefix, &want);
    CHECK(encode_ok(t, prefix) == want);
  };
  const TokenizerData d = bpe_data({"a", "b", "aa", "aaa", "aaaa", "ab", "abab", "ba", "bb", "aab"},
                                   {"a a", "aa aa", "aa a", "a b", "ab ab", "b a", "b b", "aa b"});
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(d, &t).ok());
  check(*t, d, run);
  check(*t, d, word);

  const Model* m = smollm2();
  if (!m) {
    MESSAGE("SmolLM2 part skipped: no SmolLM2 GGUF");
    return;
  }
  for (char& c : word) c = char('a' + rng() % 26);
  check(m->tokenizer(), m->spec().tokenizer, run);
  check(m->tokenizer(), m->spec().tokenizer, word);
}

TEST_CASE("byte-level BPE: SmolLM2 heap merges equal GPT-2's merge loop on random words, its merge list is monotone") {
  const Model* m = smollm2();
  if (!m) {
    MESSAGE("skipped: no SmolLM2 GGUF");
    return;
  }
  const Tokenizer& t = m->tokenizer();
  const TokenizerData& d = m->spec().tokenizer;
  const ref::Bpe r(d);
  std::mt19937 rng(99);
  size_t tokens = 0, bytes = 0;
  for (int k = 0; k < 400; ++k) {
    // Letters that make many English merges, "é" for two-byte symbols, a few long words.
    const std::string text = k % 20 == 0 ? random_words(rng, "aeinorst", 1, 2000, true)
                                         : random_words(rng, k % 2 ? "aeinorstlh" : "ab", 1 + rng() % 30, 14, true);
    const std::vector<int32_t> got = encode_ok(t, text);
    REQUIRE_MESSAGE(got == r.words(text), "text '" << text.substr(0, 80) << "'");
    CHECK(decode_ok(t, got) == text);
    CHECK(within_bound(t, text.size(), got.size()));
    tokens += got.size();
    bytes += text.size();
  }
  MESSAGE("400 texts, " << bytes << " bytes, " << tokens << " tokens; max_token_bytes " << t.max_token_bytes());

  // Where GPT-2's loop and HF's heap could differ: a merge ranked before a merge that makes
  // one of its parts. SmolLM2's list has none, so matching one matches the other.
  std::unordered_map<std::string, size_t> made_by;  // merge result -> highest rank making it
  for (size_t i = 0; i < d.merges.size(); ++i) {
    const std::string& mg = d.merges[i];
    const size_t sp = mg.find(' ', 1);
    made_by[mg.substr(0, sp) + mg.substr(sp + 1)] = i;
  }
  size_t out_of_order = 0;
  for (size_t i = 0; i < d.merges.size(); ++i) {
    const std::string& mg = d.merges[i];
    const size_t sp = mg.find(' ', 1);
    for (const std::string& part : {mg.substr(0, sp), mg.substr(sp + 1)}) {
      auto it = made_by.find(part);
      out_of_order += it != made_by.end() && it->second > i;
    }
  }
  CHECK(out_of_order == 0);
}

TEST_CASE("SentencePiece BPE: heap merges equal the rescanning loop on random vocabularies and texts") {
  std::mt19937 rng(4242);
  size_t texts = 0, errors = 0, merged = 0;
  for (int v = 0; v < 200; ++v) {
    const TokenizerData d = random_spm_vocab(rng);
    std::unique_ptr<Tokenizer> t;
    REQUIRE(Tokenizer::create(d, &t).ok());
    const ref::Spm r(d);
    for (int k = 0; k < 40; ++k) {
      const std::string text = random_spm_text(rng, k % 8 == 0 ? 400 : 40);
      std::vector<int32_t> want, got;
      const Status sw = text.empty() ? Status::Ok() : r.encode(text, &want);
      const Status sg = t->encode(text, false, &got);
      REQUIRE_MESSAGE(sg.ok() == sw.ok(), "vocabulary " << v << ", text '" << text << "': " << sg.to_string());
      if (!sw.ok()) {
        CHECK(sg.message() == sw.message());
        ++errors;
        continue;
      }
      REQUIRE_MESSAGE(got == want, "vocabulary " << v << ", text '" << text << "'");
      ++texts;
      bool any = false;  // a token of two units or more: pairs did merge
      std::string b;
      for (int32_t id : got) any |= id != d.unk_id && t->token_bytes(id, &b).ok() && b.size() >= 2;
      merged += any;
    }
  }
  MESSAGE(texts << " texts encoded, " << errors << " refused alike (no token, no byte fallback, no unknown)");
  CHECK(merged > texts / 4);
  CHECK(errors > 0);
}

TEST_CASE("SentencePiece BPE: hand-derived ties (equal scores, repeated pairs) and a NaN score refused") {
  TokenizerData d;
  d.type = TokenizerType::SentencePiece;
  d.model = "llama";
  // ids: 0 <unk> 1 a 2 b 3 aa 4 ab 5 ba 6 aaaa 7 bb
  d.tokens = {"<unk>", "a", "b", "aa", "ab", "ba", "aaaa", "bb"};
  d.scores = {0, -5, -5, -1, -1, -1, -2, -0.5f};
  d.token_types = {2, 1, 1, 1, 1, 1, 1, 1};
  d.unk_id = 0;
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(d, &t).ok());
  CHECK(encode_ok(*t, "aaa") == std::vector<int32_t>{3, 1});   // a+a twice at -1: the left one; aa+a no token
  CHECK(encode_ok(*t, "aab") == std::vector<int32_t>{3, 2});   // a+a and a+b tie at -1: the left one
  CHECK(encode_ok(*t, "bab") == std::vector<int32_t>{5, 2});   // b+a and a+b tie: the left one
  CHECK(encode_ok(*t, "aaaa") == std::vector<int32_t>{6});     // aa a a -> aa aa -> aaaa (-2)
  CHECK(encode_ok(*t, "abb") == std::vector<int32_t>{1, 7});   // b+b (-0.5) beats the leftmost a+b (-1)
  CHECK(encode_ok(*t, "aaaaa") == std::vector<int32_t>{6, 1});  // aa a a a -> aa aa a -> aaaa a
  CHECK(encode_ok(*t, "ac") == std::vector<int32_t>{1, 0});    // no token, no byte fallback: unknown

  d.scores[4] = std::nanf("");
  Status s = Tokenizer::create(d, &t);
  CHECK(s.code() == StatusCode::kInvalidFile);
  CHECK(s.message().find("tokenizer.scores[4] (token 'ab') is NaN") != std::string::npos);
}

TEST_CASE("SentencePiece BPE: 400 KB texts encode and decode back, their first 4 KB as the rescanning loop gives") {
  TokenizerData d;
  d.type = TokenizerType::SentencePiece;
  d.model = "llama";
  d.add_space_prefix = true;
  auto add = [&](const std::string& tok, float score, int32_t type) {
    d.tokens.push_back(tok);
    d.scores.push_back(score);
    d.token_types.push_back(type);
  };
  add("<unk>", 0, 2);
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0, 6);
  }
  const char* pieces[] = {"a", "b", "\xE2\x96\x81", "aa", "ab", "ba", "bb", "aaaa", "aaaaaaaa", "abab", "\xE2\x96\x81" "a",
                          "\xE2\x96\x81" "b", "\xE2\x96\x81" "ab", "aab", "bba", "abba"};
  float score = -1;
  for (const char* p : pieces) add(p, score -= 0.25f, 1);
  d.unk_id = 0;
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(d, &t).ok());
  const ref::Spm r(d);
  std::mt19937 rng(11);
  std::string run(400000, 'a'), mixed(400000, ' ');
  for (char& c : mixed) c = "ab a"[rng() % 4];
  for (const std::string* x : {&run, &mixed}) {
    const std::vector<int32_t> ids = encode_ok(*t, *x);
    CHECK(decode_ok(*t, ids) == " " + *x);
    CHECK(within_bound(*t, x->size(), ids.size()));
    const std::string prefix = x->substr(0, 4096);
    std::vector<int32_t> want;
    REQUIRE(r.encode(prefix, &want).ok());
    CHECK(encode_ok(*t, prefix) == want);
  }
}

TEST_CASE("tokenizer: the special-token scan with its first-byte filter finds what the scan at every byte found (with and without a mask)") {
  std::mt19937 rng(5);
  TokenizerData d = random_spm_vocab(rng);
  for (const char* s : {"<|im_start|>", "<|im_end|>", "<|im_sep|>", "<x>"}) {
    d.tokens.push_back(s);
    d.scores.push_back(0);
    d.token_types.push_back(4);
  }
  d.unk_id = int32_t(d.tokens.size());  // every text encodes: no "no token" refusals here
  d.tokens.push_back("<unk2>");
  d.scores.push_back(0);
  d.token_types.push_back(2);
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(d, &t).ok());
  auto check_all = [&](const Tokenizer& tok, const TokenizerData& data, const std::vector<std::string>& frags,
                       int n) {
    auto plain = [&](std::string_view run, std::vector<int32_t>* out) { return tok.encode(run, false, out); };
    size_t specials = 0;
    for (int k = 0; k < n; ++k) {
      std::string text;
      const size_t len = rng() % 24;
      for (size_t i = 0; i < len; ++i) text += frags[rng() % frags.size()];
      std::vector<int32_t> want, got;
      REQUIRE(ref::special_scan(data, text, nullptr, plain, &want).ok());
      REQUIRE(tok.encode(text, true, &got).ok());
      REQUIRE_MESSAGE(got == want, "text '" << text << "'");
      for (int32_t id : got) specials += tok.is_special(id);
      std::vector<uint8_t> mask(text.size());
      for (uint8_t& b : mask) b = rng() % 8 != 0;
      want.clear();
      got.clear();
      REQUIRE(ref::special_scan(data, text, &mask, plain, &want).ok());
      REQUIRE(tok.encode_masked(text, mask, &got).ok());
      REQUIRE_MESSAGE(got == want, "masked text '" << text << "'");
    }
    CHECK(specials > size_t(n));
  };
  check_all(*t, d, {"<|im_start|>", "<|im_end|>", "<|im_", "<|im_sep", "<x>", "<x", "<s>", "</s>", "<", ">", "|", "a",
                    "b", " ", "x"},
            2000);

  const Model* m = smollm2();
  if (!m) {
    MESSAGE("SmolLM2 part skipped: no SmolLM2 GGUF");
    return;
  }
  check_all(m->tokenizer(), m->spec().tokenizer,
            {"<|im_start|>", "<|im_end|>", "<|im_", "<|endoftext|>", "<|", "<", ">", "|", "user", "\n", " hi", "é"}, 500);
}

TEST_CASE("tokenizer: max_token_bytes is the longest token's decoded bytes (BPE) or stored text (SentencePiece)") {
  // Byte-level: "ĠĠĠ" is stored in 6 bytes and stands for 3 spaces.
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(bpe_data({"a", "b", kG, "ab", kG + kG + kG}, {"a b", kG + " " + kG}), &t).ok());
  CHECK(t->max_token_bytes() == 3);

  // SentencePiece: "▁▁▁▁" decodes to 4 spaces but stands for 12 bytes of literal U+2581.
  TokenizerData d;
  d.type = TokenizerType::SentencePiece;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", kLow, kLow + kLow, kLow + kLow + kLow + kLow, "a"};
  d.scores = {0, 0, -1, -1, -1, -1};
  d.token_types = {2, 3, 1, 1, 1, 1};
  d.unk_id = 0;
  REQUIRE(Tokenizer::create(d, &t).ok());
  CHECK(t->max_token_bytes() == 12);
  std::string lows;
  for (int i = 0; i < 8; ++i) lows += kLow;
  const std::vector<int32_t> ids = encode_ok(*t, lows);
  // 24 bytes in 2 tokens: the longest decoded token ("<unk>", 5 bytes) would promise at least 5.
  CHECK(ids == std::vector<int32_t>{4, 4});
  CHECK(within_bound(*t, lows.size(), ids.size()));

  const Model* m = smollm2();
  if (!m) {
    MESSAGE("SmolLM2 part skipped: no SmolLM2 GGUF");
    return;
  }
  size_t longest = 0;
  std::string b;
  for (int32_t id = 0; id < m->tokenizer().n_tokens(); ++id) {
    REQUIRE(m->tokenizer().token_bytes(id, &b).ok());
    longest = std::max(longest, b.size());
  }
  CHECK(m->tokenizer().max_token_bytes() == longest);
  MESSAGE("SmolLM2: max_token_bytes " << longest);
}

TEST_CASE("tokenizer: min_tokens is a lower bound on encode's count, and ignores bytes encode drops") {
  // Hand-made BPE vocabulary: "a", "b", "ab"; no token for "c" (dropped by encode).
  std::unique_ptr<Tokenizer> t;
  REQUIRE(Tokenizer::create(bpe_data({"a", "b", "ab"}, {"a b"}), &t).ok());
  CHECK(t->max_token_bytes() == 2);
  CHECK(t->min_tokens("abab") == 2);        // ceil(4 / 2)
  CHECK(t->min_tokens("aba") == 2);         // ceil(3 / 2)
  CHECK(t->min_tokens("cccccccc") == 0);    // every byte dropped: encode gives nothing
  CHECK(encode_ok(*t, "cccccccc").empty());
  CHECK(t->min_tokens("ccab") == 1);
  const Model* m = smollm2();
  if (!m) return;
  // On random byte strings (valid UTF-8) the bound never exceeds what encode gives.
  std::mt19937 rng(11);
  const Tokenizer& tok = m->tokenizer();
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    const size_t n = 1 + rng() % 600;
    while (s.size() < n) {
      const uint32_t r = rng() % 4;
      if (r == 0) s += char('a' + rng() % 26);
      else if (r == 1) s += std::string(size_t(rng() % 40), "= \x04-"[rng() % 4]);
      else if (r == 2) s += "\xF1\x80\x80\x80";  // a lead byte SmolLM2 has no token for
      else s += " word";
    }
    std::vector<int32_t> ids;
    REQUIRE(tok.encode(s, false, &ids).ok());
    CHECK(tok.min_tokens(s) <= ids.size());
  }
}
