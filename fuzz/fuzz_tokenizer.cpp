// libFuzzer target: tokenizer encode and decode on arbitrary bytes.
//
// Tokenizers, built once per process:
//   * the byte-level BPE of the fuzz model ($PHASEKV_FUZZ_MODEL, default SmolLM2-135M-Instruct
//     in the PhaseKV cache), with its own pre-tokenizer ("smollm": digits split) and again with
//     the plain GPT-2 pre-tokenizer;
//   * a small SentencePiece-style vocabulary made here (pieces with scores, specials, all 256
//     byte-fallback tokens, a space prefix).
//
// Input: text (any bytes, also invalid UTF-8); the same bytes are also read as a sequence of
// token ids (2 bytes each). Invariants (docs/FUZZING.md):
//   * encode fails exactly when the text is not valid UTF-8 (kInvalidArgument), and then
//     writes nothing; every id it gives is inside the vocabulary;
//   * without parse_special, user text never yields a special (control) token;
//   * round trip, byte-level BPE: decode(encode(s)) is s with only those bytes removed that
//     have no token of their own in the vocabulary (HF tokenizers drop them the same way;
//     SmolLM2 lacks e.g. 0x04), with and without parse_special;
//   * round trip, SentencePiece: decode(encode(s)) is " " + s with U+2581 read as a space
//     (empty text gives no tokens);
//   * decode fails exactly when an id is outside the vocabulary, and then leaves its output
//     alone; otherwise it is the concatenation of token_bytes;
//   * StreamDecoder emits only valid UTF-8, refuses bad ids without losing state, and gives
//     exactly decode(ids) when that is valid UTF-8.
#include <climits>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer.h"

using namespace phasekv;
using namespace phasekv::fuzz;

namespace {

struct Subject {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
  bool byte_level = false;
  bool droppable[256] = {};         // byte-level: bytes with no token of their own
  bool round_trip_special = false;  // byte-level: specials' texts hold no droppable byte
  bool special_lead[256] = {};      // first bytes of special tokens' texts
  bool full = true;                 // false: only encode(text) without specials (a variant)
};

// Marks the first byte of every special token: text without any of them encodes the same
// with and without parse_special, so the second encode can be skipped.
void mark_special_leads(Subject* s) {
  for (int32_t id = 0; id < s->tok->n_tokens(); ++id) {
    std::string t;
    if (s->tok->is_special(id) && s->tok->token_bytes(id, &t).ok() && !t.empty())
      s->special_lead[static_cast<unsigned char>(t[0])] = true;
  }
}

TokenizerData make_spm_data() {
  TokenizerData d;
  d.type = TokenizerType::SentencePiece;
  d.model = "llama";
  auto add = [&](const std::string& t, float score, int32_t type) {
    d.tokens.push_back(t);
    d.scores.push_back(score);
    d.token_types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  add("<|im_start|>", 0, 4);
  add("<|im_end|>", 0, 4);
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0, 6);
  }
  const char* pieces[] = {"\xE2\x96\x81", "\xE2\x96\x81t", "\xE2\x96\x81th", "\xE2\x96\x81the", "he", "th", "t",
                          "h", "e", "a", ("\xE2\x96\x81" "a"), "l", "ll", "o", "llo", "\xE2\x96\x81hello", "\xE2\x96\x81w",
                          "or", "ld", "\xE2\x96\x81world", "1", "2", "12", "\xE6\x97\xA5", "\xE6\x9C\xAC",
                          "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x9A\x80", "\xC3\xA9", "\n", "\xE2\x96\x81\xE2\x96\x81",
                          "<", "|", ">", "s", "<s", "x", "xx", "xxxx"};
  float score = -1.0f;
  for (const char* p : pieces) add(p, score -= 0.5f, 1);
  d.unk_id = 0;
  d.bos_id = 1;
  d.eos_id = 2;
  d.add_bos = true;
  d.add_space_prefix = true;
  return d;
}

std::vector<Subject>& subjects() {
  static std::vector<Subject> all = [] {
    std::vector<Subject> v;
    const std::string path = fuzz_model_path();
    TokenizerData bpe = load_tokenizer_data(path);
    if (bpe.type != TokenizerType::ByteLevelBPE) {
      std::fprintf(stderr, "fuzz: '%s' has a %s tokenizer; this target wants a byte-level BPE one\n", path.c_str(),
                   tokenizer_type_name(bpe.type));
      std::exit(2);
    }
    const std::vector<std::string> byte_text = gpt2_byte_texts();
    for (const char* pre : {"", "gpt2"}) {
      Subject s;
      TokenizerData d = bpe;
      if (*pre) d.pre = pre;
      s.name = "bpe(pre=" + d.pre + ")";
      Status st = Tokenizer::create(d, &s.tok);
      if (!st.ok()) {
        std::fprintf(stderr, "fuzz: %s: %s\n", s.name.c_str(), st.to_string().c_str());
        std::exit(2);
      }
      s.byte_level = true;
      int n_drop = 0;
      for (int b = 0; b < 256; ++b) n_drop += (s.droppable[b] = s.tok->find(byte_text[size_t(b)]) < 0);
      s.round_trip_special = true;
      for (int32_t id = 0; id < s.tok->n_tokens(); ++id) {
        if (!s.tok->is_special(id)) continue;
        std::string t;
        (void)s.tok->token_bytes(id, &t);
        for (unsigned char c : t) s.round_trip_special &= !s.droppable[c];
      }
      s.full = !*pre;  // the plain GPT-2 pre-tokenizer differs in digits only: a lighter check
      mark_special_leads(&s);
      if (!*pre) {
        std::fprintf(stderr, "fuzz: tokenizer from %s: %d tokens, %d bytes without a token of their own:",
                     path.c_str(), s.tok->n_tokens(), n_drop);
        for (int b = 0; b < 256; ++b)
          if (s.droppable[b]) std::fprintf(stderr, " %02x", b);
        std::fprintf(stderr, "\n");
      }
      v.push_back(std::move(s));
    }
    Subject spm;
    spm.name = "spm(synthetic)";
    Status st = Tokenizer::create(make_spm_data(), &spm.tok);
    if (!st.ok()) {
      std::fprintf(stderr, "fuzz: %s: %s\n", spm.name.c_str(), st.to_string().c_str());
      std::exit(2);
    }
    mark_special_leads(&spm);
    v.push_back(std::move(spm));
    return v;
  }();
  return all;
}

// Is `got` what byte-level BPE should give back for `text`: text minus droppable bytes only?
bool bpe_round_trip(const std::string& text, const std::string& got, const bool* droppable) {
  size_t j = 0;
  for (unsigned char c : text) {
    if (j < got.size() && static_cast<unsigned char>(got[j]) == c) ++j;
    else if (!droppable[c]) return false;
  }
  return j == got.size();
}

std::string spm_expected(const std::string& text) {
  if (text.empty()) return "";  // no text, no space prefix
  std::string e = " ";
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
      e += ' ';
      i += 2;
    } else {
      e += text[i];
    }
  }
  return e;
}

void check_encode(const Subject& s, const std::string& text, bool with_special) {
  const Tokenizer& tok = *s.tok;
  const int32_t n = tok.n_tokens();
  const bool valid = valid_utf8(text);
  bool lead = false;
  for (unsigned char c : text) lead |= s.special_lead[c];
  for (bool special : {false, true}) {
    if (special && (!with_special || !lead)) break;
    std::vector<int32_t> ids = {-7};  // encode appends; the sentinel must stay alone on failure
    Status st = tok.encode(text, special, &ids);
    if (!valid) {
      check_error(st, "encode(invalid UTF-8)");
      FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument, "%s: invalid UTF-8 gave %s", s.name.c_str(),
                 st.to_string().c_str());
      FUZZ_CHECK(ids.size() == 1 && ids[0] == -7, "%s: a failed encode wrote tokens", s.name.c_str());
      continue;
    }
    FUZZ_CHECK(st.ok(), "%s: encode of valid UTF-8 failed: %s", s.name.c_str(), st.to_string().c_str());
    FUZZ_CHECK(ids[0] == -7, "%s: encode overwrote the output", s.name.c_str());
    ids.erase(ids.begin());
    FUZZ_CHECK(ids.size() <= text.size() + 1, "%s: %zu tokens for %zu bytes", s.name.c_str(), ids.size(), text.size());
    for (int32_t id : ids) {
      FUZZ_CHECK(id >= 0 && id < n, "%s: id %d outside [0, %d)", s.name.c_str(), id, n);
      if (!special)
        FUZZ_CHECK(!tok.is_special(id), "%s: user text (parse_special off) gave special token %d", s.name.c_str(),
                   id);
    }
    std::string back;
    FUZZ_CHECK(tok.decode(ids, &back).ok(), "%s: decode of encoded ids failed", s.name.c_str());
    if (s.byte_level) {
      if (!special || s.round_trip_special)
        FUZZ_CHECK(bpe_round_trip(text, back, s.droppable),
                   "%s: decode(encode(text, parse_special=%d)) is not the text (%zu -> %zu bytes)", s.name.c_str(),
                   int(special), text.size(), back.size());
    } else if (!special) {
      FUZZ_CHECK(back == spm_expected(text), "%s: decode(encode(text)) is not ' ' + text", s.name.c_str());
    }
  }
}

// Ids from the input: 2 bytes each, mostly inside the vocabulary, some just past its ends.
std::vector<int32_t> ids_from(const uint8_t* data, size_t size, int32_t n) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2) {
    const uint32_t v = uint32_t(data[i]) | uint32_t(data[i + 1]) << 8;
    if (v >= 0xFFF0u) {
      const int32_t edge[] = {-1, n, n + 1, INT32_MIN, INT32_MAX, -2};
      ids.push_back(edge[(v - 0xFFF0u) % 6]);
    } else {
      ids.push_back(int32_t(v % uint32_t(n)));
    }
  }
  return ids;
}

void check_decode(const Subject& s, const std::vector<int32_t>& ids) {
  const Tokenizer& tok = *s.tok;
  const int32_t n = tok.n_tokens();
  bool all_in = true;
  std::string concat, piece;
  std::vector<int32_t> good;
  for (int32_t id : ids) {
    if (id < 0 || id >= n) {
      all_in = false;
      check_error(tok.token_bytes(id, &piece), "token_bytes(bad id)");
      continue;
    }
    FUZZ_CHECK(tok.token_bytes(id, &piece).ok(), "%s: token_bytes(%d) failed", s.name.c_str(), id);
    concat += piece;
    good.push_back(id);
  }
  std::string out = "sentinel";
  Status st = tok.decode(ids, &out);
  if (!all_in) {
    check_error(st, "decode(bad id)");
    FUZZ_CHECK(out == "sentinel", "%s: a failed decode changed its output", s.name.c_str());
  } else {
    FUZZ_CHECK(st.ok() && out == concat, "%s: decode is not the concatenation of token_bytes", s.name.c_str());
  }

  // The stream decoder over the same ids (bad ones refused on the way).
  StreamDecoder sd(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const size_t before = streamed.size();
    Status ps = sd.push(id, &streamed);
    if (id < 0 || id >= n) {
      check_error(ps, "StreamDecoder::push(bad id)");
      FUZZ_CHECK(streamed.size() == before, "%s: a refused push emitted text", s.name.c_str());
    } else {
      FUZZ_CHECK(ps.ok(), "%s: StreamDecoder::push(%d) failed", s.name.c_str(), id);
    }
  }
  sd.flush(&streamed);
  FUZZ_CHECK(valid_utf8(streamed), "%s: StreamDecoder emitted invalid UTF-8", s.name.c_str());
  if (valid_utf8(concat))
    FUZZ_CHECK(streamed == concat, "%s: streamed text differs from decode() of valid UTF-8", s.name.c_str());
  // Text made of whole tokens is ordinary input too.
  if (concat.size() <= 1024 && valid_utf8(concat)) check_encode(s, concat, false);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)subjects();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const Subject& s : subjects()) {
    if (!s.full) {
      bool digit_or_wide = false;
      for (unsigned char c : text) digit_or_wide |= (c >= '0' && c <= '9') || c >= 0x80;
      if (digit_or_wide) check_encode(s, text, false);
      continue;
    }
    check_encode(s, text, true);
    check_decode(s, ids_from(data, size, s.tok->n_tokens()));
  }
  return 0;
}
