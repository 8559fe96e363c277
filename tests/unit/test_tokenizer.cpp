// Tokenizers: SmolLM2's byte-level BPE against HF `tokenizers` on a generated corpus
// (tests/reference/make_tokenizer_corpus.py + tokenizer_ref.py), the streaming decoder, and a
// hand-derived SentencePiece case.
#include <doctest/doctest.h>

#include <set>

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
