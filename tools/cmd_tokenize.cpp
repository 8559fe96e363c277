// phasekv tokenize -m MODEL (-p TEXT | -f FILE | --template FILE) [--ids] [--no-bos]
//                  [--no-special] [--period P] [--json]
//
// Token ids, pieces and the count of a text, as llama.cpp's llama-tokenize prints them
// ("ID -> 'piece'"; --ids: the ids only, as a list). Specials written in the text are parsed as
// specials unless --no-special (llama.cpp's convention for a raw prompt); BOS is prepended when
// the model adds one unless --no-bos. --template FILE is a prompt template with one
// {{content}} slot, tokenized as the self-test does: T0 (the tokens before the slot), the slot's
// phase T0 mod P for the model's period P (the lcm of its compressed strides, or --period), and
// the tokens around the slot.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "file_io.h"
#include "phase_guard.h"
#include "model.h"
#include "selftest.h"

namespace phasekv {
namespace tools {

namespace {

using nlohmann::json;

struct TokenizeArgs {
  std::string model, prompt, file, template_file;
  std::string phase_align;   // --phase-align REPORT.json (with --template)
  std::string aligned_out;   // --aligned-out FILE
  bool prompt_given = false;
  bool ids_only = false, no_bos = false, no_special = false, json = false;
  int period = 0;
};

// A piece as printable text: the bytes as they are, except control characters, backslash,
// quote and bytes of incomplete UTF-8, which are escaped (\n, \t, \\, \', \xNN).
std::string escaped(const std::string& b) {
  std::string o;
  for (size_t i = 0; i < b.size();) {
    const unsigned char c = static_cast<unsigned char>(b[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool valid = len > 0 && i + len <= b.size();
    for (size_t k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(b[i + k]) >> 6) == 2;
    if (valid && len > 1) {
      o.append(b, i, len);
      i += len;
      continue;
    }
    char buf[8];
    if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c == '\r') o += "\\r";
    else if (c == '\\') o += "\\\\";
    else if (c == '\'') o += "\\'";
    else if (c < 0x20 || c >= 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      o += buf;
    } else {
      o += char(c);
    }
    ++i;
  }
  return o;
}

Status pieces(const Tokenizer& tok, const std::vector<int32_t>& ids, json* out_json, std::vector<std::string>* out) {
  *out_json = json::array();
  for (int32_t id : ids) {
    std::string b;
    PKV_RETURN_IF_ERROR(tok.token_bytes(id, &b));
    out->push_back(escaped(b));
    out_json->push_back({{"id", id}, {"piece", out->back()}, {"special", tok.is_special(id)}});
  }
  return Status::Ok();
}

int run_tokenize(const TokenizeArgs& a) {
  const int given = int(a.prompt_given) + int(!a.file.empty()) + int(!a.template_file.empty());
  if (given != 1)
    return report("tokenize", make_error(StatusCode::kInvalidArgument,
                                         "give exactly one of -p TEXT, -f FILE and --template FILE (%d given)", given));
  std::unique_ptr<Model> model;
  Status s = Model::load(a.model, &model);
  if (!s.ok()) return report("tokenize", s);
  const Tokenizer& tok = model->tokenizer();

  if (!a.template_file.empty()) {
    std::string text;
    s = read_text_file("--template", a.template_file, &text);
    if (!s.ok()) return report("tokenize", s);
    TemplateAlignment al;
    if (!a.aligned_out.empty() && a.phase_align.empty())
      return report("tokenize", make_error(StatusCode::kInvalidArgument, "--aligned-out needs --phase-align"));
    s = check_outputs({{"--aligned-out", a.aligned_out}},
                      {{"-m", a.model}, {"--template", a.template_file}, {"--phase-align", a.phase_align}});
    if (!s.ok()) return report("tokenize", s);
    if (!a.phase_align.empty()) {
      PhaseProfile prof;
      s = read_phase_profile(a.phase_align, &prof);
      if (!s.ok()) return report("tokenize", s);
      s = align_template(tok, text, prof, &al);
      if (!s.ok()) return report("tokenize", s.with_context("--phase-align"));
      text = al.text;
      if (!a.aligned_out.empty()) {
        s = write_file_atomic("--aligned-out", a.aligned_out, text);
        if (!s.ok()) return report("tokenize", s);
      }
    }
    ProbeTemplate t;
    s = parse_template(tok, text, &t);
    if (!s.ok()) return report("tokenize", s.with_context("--template"));
    uint32_t P = 1;
    std::vector<uint32_t> strides;
    s = phase_period(model->spec(), &P, &strides);
    if (!s.ok()) return report("tokenize", s);
    const char* source = "strides";
    if (a.period > 0) {
      P = uint32_t(a.period);
      source = "override";
    }
    const uint32_t t0 = uint32_t(t.prefix.size());
    json jp, js;
    std::vector<std::string> pp, ps;
    if (!(s = pieces(tok, t.prefix, &jp, &pp)).ok() || !(s = pieces(tok, t.suffix, &js, &ps)).ok())
      return report("tokenize", s);
    if (a.json) {
      json j = {{"t0", t0},
                {"prefix_tokens", t.prefix.size()},
                {"suffix_tokens", t.suffix.size()},
                {"period", P > 1 ? json(P) : json(nullptr)},
                {"period_source", P > 1 ? json(source) : json(nullptr)},
                {"strides", strides},
                {"phase", P > 1 ? json(t0 % P) : json(nullptr)},
                {"prefix", jp},
                {"suffix", js}};
      if (!a.phase_align.empty())
        j["aligned"] = {{"changed", al.changed}, {"t0_before", al.t0}, {"inserted_tokens", al.inserted_tokens},
                        {"inserted_text", al.inserted_text}, {"target_residue", al.target_residue},
                        {"template_text", text}};
      std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
      return kExitOk;
    }
    if (!a.phase_align.empty()) {
      if (al.changed)
        std::printf("aligned: %u token%s (\"%s\") inserted before the slot: T0 %u -> %u, onto residue %u\n",
                    al.inserted_tokens, al.inserted_tokens == 1 ? "" : "s", display_escape(al.inserted_text).c_str(),
                    al.t0, al.aligned_t0, al.target_residue);
      else
        std::printf("aligned: unchanged (no weak residue, or the slot already starts on residue %u)\n",
                    al.target_residue);
    }
    std::printf("template: %u tokens before the slot (T0 = %u), %zu after\n", t0, t0, t.suffix.size());
    if (P > 1)
      std::printf("period %u (%s): the slot starts on residue %u\n", P,
                  a.period > 0 ? "--period" : "lcm of the compressed strides", t0 % P);
    else
      std::printf("period: none (no compressed layer; give --period P for a phase)\n");
    std::printf("around the slot:");
    const size_t from = t.prefix.size() > 3 ? t.prefix.size() - 3 : 0;
    for (size_t i = from; i < t.prefix.size(); ++i) std::printf(" [%zu] %d '%s'", i, t.prefix[i], pp[i].c_str());
    std::printf(" | {{content}} |");
    for (size_t i = 0; i < t.suffix.size() && i < 3; ++i)
      std::printf(" [+%zu] %d '%s'", i, t.suffix[i], ps[i].c_str());
    std::printf("\n");
    return kExitOk;
  }

  std::string text = a.prompt;
  if (!a.file.empty()) {
    s = read_text_file("-f", a.file, &text);
    if (!s.ok()) return report("tokenize", s);
  }
  std::vector<int32_t> ids;
  if (!a.no_bos && tok.add_bos() && tok.bos() >= 0) ids.push_back(tok.bos());
  s = tok.encode(text, !a.no_special, &ids);
  if (!s.ok()) return report("tokenize", s.with_context(a.file.empty() ? "-p" : "-f"));
  json jt;
  std::vector<std::string> ps;
  s = pieces(tok, ids, &jt, &ps);
  if (!s.ok()) return report("tokenize", s);
  if (a.json) {
    json j = {{"count", ids.size()}, {"ids", ids}, {"tokens", jt}};
    std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else if (a.ids_only) {
    std::printf("[");
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? ", " : "", ids[i]);
    std::printf("]\n");
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%6d -> '%s'\n", ids[i], ps[i].c_str());
    std::printf("Total number of tokens: %zu\n", ids.size());
  }
  return kExitOk;
}

}  // namespace

void register_tokenize(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Token ids, pieces and count of a text, a file or a prompt template (T0 and its phase)");
  cmd->add_option("-m,--model", a->model, "PhaseKV model file (.pkv)")->required();
  cmd->add_option("-p,--prompt", a->prompt, "The text")->each([a](const std::string&) { a->prompt_given = true; });
  cmd->add_option("-f,--file", a->file, "Read the text from a file (UTF-8)");
  cmd->add_option("--template", a->template_file,
                  "A prompt template with one {{content}} slot: T0, its phase, the tokens around the slot");
  cmd->add_option("--phase-align", a->phase_align,
                  "With --template: align it first with a self-test report (selftest --json): neutral tokens before "
                  "the slot move content onto the strongest residue");
  cmd->add_option("--aligned-out", a->aligned_out, "With --phase-align: write the aligned template to this file");
  cmd->add_option("--period", a->period, "Period for the slot's phase (default: lcm of the compressed strides)")
      ->check(CLI::Range(2, 256));
  cmd->add_flag("--ids", a->ids_only, "Print the ids only, as a list");
  cmd->add_flag("--no-bos", a->no_bos, "Do not prepend BOS (default: when the model adds one)");
  cmd->add_flag("--no-special", a->no_special, "Encode special-token text as plain text (default: parse specials)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, exit_code] {
    if (!exit_code) return;  // parse only (fuzz_cli)
    *exit_code = run_tokenize(*a);
  });
}

}  // namespace tools
}  // namespace phasekv
