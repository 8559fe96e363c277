// libFuzzer target: the self-test's prompt-template parser (parse_template: one {{content}}
// slot, specials written literally) and the chat-template renderer (apply_chat_template).
//
// Tokenizer, built once per process: a byte-level BPE vocabulary made here (all 256 byte
// tokens, a few merges, the ChatML and Llama-3 specials), so that this target needs no model
// file and parse_template's scan of the vocabulary stays cheap. With
// PHASEKV_FUZZ_TEMPLATE_TOKENIZER=model it uses the fuzz model's tokenizer instead
// ($PHASEKV_FUZZ_MODEL, default SmolLM2-135M-Instruct in the PhaseKV cache; ~50x slower).
//
// Input: TEMPLATE ['\0' ROLE '\0' CONTENT]...  TEMPLATE is both a self-test template and a
// Jinja chat template; the NUL-separated pairs are chat messages (without any, a system and a
// user message are used). Invariants (docs/FUZZING.md):
//   * parse_template fails (kInvalidArgument) when the slot count is not 1, the text is not
//     UTF-8 or starts with a byte-order mark, and then leaves its output alone; when it succeeds, prefix_text + slot +
//     suffix_text is the template, all ids are in the vocabulary, BOS leads exactly when the
//     tokenizer adds one, and the prefix and suffix tokens decode back to their text;
//   * apply_chat_template succeeds exactly for a recognised family (chatml, llama3) and
//     non-empty roles, otherwise fails with a status; the rendering holds every message's
//     role and content, in order, and ends in the generation prompt when asked;
//   * the model's chat template with the slot as the user message (what `selftest --chat`
//     does) either parses as a template or is refused with a status.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "chat_template.h"
#include "fuzz_util.h"
#include "selftest.h"
#include "tokenizer.h"

using namespace phasekv;
using namespace phasekv::fuzz;

namespace {

struct Subject {
  std::unique_ptr<Tokenizer> tok;
  bool droppable[256] = {};
};

TokenizerData synthetic_vocabulary() {
  TokenizerData d;
  d.type = TokenizerType::ByteLevelBPE;
  d.model = "gpt2";
  d.pre = "smollm";
  for (const char* sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
                         "<|end_header_id|>", "<|eot_id|>"}) {
    d.tokens.push_back(sp);
    d.token_types.push_back(3);
  }
  for (const std::string& b : gpt2_byte_texts()) {
    d.tokens.push_back(b);
    d.token_types.push_back(1);
  }
  const std::vector<std::string> bt = gpt2_byte_texts();
  const std::string sp = bt[' '], nl = bt['\n'];
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"u", "s"}, {"us", "e"}, {"use", "r"}, {"a", "s"}, {"as", "s"}, {"ass", "i"}, {"s", "y"}, {"sy", "s"},
      {nl, nl}, {sp, "t"}, {"h", "e"}, {sp + "t", "he"}, {"<", "|"}, {"|", ">"}, {"{", "{"}, {"}", "}"}};
  for (const auto& m : merges) {
    d.merges.push_back(m.first + " " + m.second);
    d.tokens.push_back(m.first + m.second);
    d.token_types.push_back(1);
  }
  d.bos_id = 3;  // <|begin_of_text|>
  d.eos_id = 0;
  d.add_bos = true;
  return d;
}

const Subject& subject() {
  static const Subject s = [] {
    Subject x;
    const char* which = std::getenv("PHASEKV_FUZZ_TEMPLATE_TOKENIZER");
    const bool model = which && std::string(which) == "model";
    const std::string path = model ? fuzz_model_path() : "(synthetic)";
    Status st = Tokenizer::create(model ? load_tokenizer_data(path) : synthetic_vocabulary(), &x.tok);
    if (!st.ok()) {
      std::fprintf(stderr, "fuzz: tokenizer %s: %s\n", path.c_str(), st.to_string().c_str());
      std::exit(2);
    }
    const std::vector<std::string> byte_text = gpt2_byte_texts();
    for (int b = 0; b < 256; ++b) x.droppable[b] = x.tok->find(byte_text[size_t(b)]) < 0;
    return x;
  }();
  return s;
}

size_t count_slots(const std::string& t) {
  const std::string slot = kContentSlot;
  size_t n = 0;
  for (size_t at = t.find(slot); at != std::string::npos; at = t.find(slot, at + slot.size())) ++n;
  return n;
}

// `got` is `text` with only bytes that have no token removed (byte-level BPE round trip).
bool same_text(const std::string& text, const std::string& got, const bool* droppable) {
  size_t j = 0;
  for (unsigned char c : text) {
    if (j < got.size() && static_cast<unsigned char>(got[j]) == c) ++j;
    else if (!droppable[c]) return false;
  }
  return j == got.size();
}

void check_parse(const std::string& text) {
  const Subject& sub = subject();
  const Tokenizer& tok = *sub.tok;
  ProbeTemplate t;
  t.prefix_text = "sentinel";
  Status s = parse_template(tok, text, &t);
  const size_t slots = count_slots(text);
  if (!s.ok()) {
    check_error(s, "parse_template");
    FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument, "parse_template failed with %s", s.to_string().c_str());
    FUZZ_CHECK(t.prefix_text == "sentinel" && t.prefix.empty(), "a failed parse_template changed its output");
    return;
  }
  FUZZ_CHECK(slots == 1, "parse_template accepted %zu slots", slots);
  FUZZ_CHECK(valid_utf8(text), "parse_template accepted invalid UTF-8");
  FUZZ_CHECK(text.compare(0, 3, "\xEF\xBB\xBF") != 0, "parse_template accepted a leading byte-order mark");
  FUZZ_CHECK(t.prefix_text + kContentSlot + t.suffix_text == text, "prefix + slot + suffix is not the template");
  const int32_t n = tok.n_tokens();
  for (const std::vector<int32_t>* v : {&t.prefix, &t.suffix})
    for (int32_t id : *v) FUZZ_CHECK(id >= 0 && id < n, "template id %d outside [0, %d)", id, n);
  std::vector<int32_t> pre = t.prefix;
  if (tok.add_bos() && tok.bos() >= 0) {
    FUZZ_CHECK(!pre.empty() && pre[0] == tok.bos(), "BOS does not lead the prefix");
    pre.erase(pre.begin());
  }
  std::string a, b;
  FUZZ_CHECK(tok.decode(pre, &a).ok() && tok.decode(t.suffix, &b).ok(), "template ids do not decode");
  FUZZ_CHECK(same_text(t.prefix_text, a, sub.droppable), "the prefix tokens do not decode to the prefix text");
  FUZZ_CHECK(same_text(t.suffix_text, b, sub.droppable), "the suffix tokens do not decode to the suffix text");
}

void check_render(const std::string& tmpl, const std::vector<ChatMessage>& msgs) {
  const std::string family = chat_template_family(tmpl);
  bool roles_ok = true;
  for (const ChatMessage& m : msgs) roles_ok &= !m.role.empty();
  for (bool gen : {false, true}) {
    std::string out = "sentinel";
    Status s = apply_chat_template(tmpl, msgs, gen, &out);
    if (family.empty() || !roles_ok) {
      check_error(s, "apply_chat_template");
      FUZZ_CHECK(out == "sentinel", "a failed render changed its output");
      continue;
    }
    FUZZ_CHECK(family == "chatml" || family == "llama3", "unknown family '%s'", family.c_str());
    FUZZ_CHECK(s.ok(), "rendering a %s template failed: %s", family.c_str(), s.to_string().c_str());
    size_t at = 0;
    for (const ChatMessage& m : msgs) {
      at = out.find(m.role, at);
      FUZZ_CHECK(at != std::string::npos, "role '%s' missing from the rendering", m.role.c_str());
      at += m.role.size();
      at = out.find(m.content, at);
      FUZZ_CHECK(at != std::string::npos, "a message's content is missing from the rendering");
      at += m.content.size();
    }
    if (gen) {
      const std::string tail = family == "chatml" ? "<|im_start|>assistant\n"
                                                  : "<|start_header_id|>assistant<|end_header_id|>\n\n";
      FUZZ_CHECK(out.size() >= tail.size() && out.compare(out.size() - tail.size(), tail.size(), tail) == 0,
                 "the generation prompt does not end the rendering");
    }
    if (count_slots(out) == 1) check_parse(out);
  }
  // What `selftest --chat` builds: the chat template with the slot as the user message.
  std::string probe;
  Status s = apply_chat_template(tmpl, {ChatMessage{"user", kContentSlot}}, true, &probe);
  if (s.ok()) check_parse(probe);
  else check_error(s, "apply_chat_template(probe)");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)subject();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t z = in.find('\0', start);
    parts.push_back(in.substr(start, z == std::string::npos ? std::string::npos : z - start));
    if (z == std::string::npos) break;
    start = z + 1;
  }
  const std::string& tmpl = parts[0];
  std::vector<ChatMessage> msgs;
  for (size_t i = 1; i < parts.size(); i += 2) msgs.push_back({parts[i], i + 1 < parts.size() ? parts[i + 1] : ""});
  if (parts.size() == 1) msgs = {{"system", "Be brief."}, {"user", "Hello \xF0\x9F\x9A\x80"}};

  check_parse(tmpl);
  check_render(tmpl, msgs);
  return 0;
}
