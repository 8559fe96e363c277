// A self-test report (selftest --json, docs/selftest.schema.json) read back as the phase
// profile run --phase-align / --phase-guard act on.
#include <nlohmann/json.hpp>

#include "commands.h"
#include "file_io.h"

namespace phasekv {
namespace tools {

Status read_phase_profile(const std::string& path, PhaseProfile* out) {
  std::string text;
  PKV_RETURN_IF_ERROR(read_text_file("report", path, &text));
  const std::string shown = display_escape(path);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const char* field) {
    return make_error(StatusCode::kInvalidFile, "report '%s': %s is missing or malformed (a phasekv selftest --json "
                      "report is expected)", shown.c_str(), field);
  };
  if (j.is_discarded() || !j.is_object()) return bad("the JSON document");
  PhaseProfile p;
  const auto period = j.find("period");
  if (period == j.end() || !period->is_number_unsigned()) return bad("period");
  p.period = period->get<uint32_t>();
  if (p.period < 2 || p.period > 256) return bad("period");
  const auto protocols = j.find("protocols");
  if (protocols == j.end() || !protocols->is_object() || protocols->empty()) return bad("protocols");
  p.accuracy.assign(p.period, 0.0);
  for (const auto& proto : *protocols) {
    const auto rows = proto.find("residues");
    if (rows == proto.end() || !rows->is_array() || rows->size() != p.period) return bad("protocols.*.residues");
    for (uint32_t r = 0; r < p.period; ++r) {
      const auto acc = (*rows)[r].find("accuracy");
      if (acc == (*rows)[r].end() || !acc->is_number()) return bad("protocols.*.residues[].accuracy");
      p.accuracy[r] += acc->get<double>() / double(protocols->size());
    }
  }
  const auto flagged = j.find("flagged");
  if (flagged == j.end() || !flagged->is_array()) return bad("flagged");
  for (const auto& f : *flagged) {
    if (!f.is_number_integer()) return bad("flagged");
    p.weak.push_back(f.get<int32_t>());
  }
  const auto tpl = j.find("template");
  if (tpl == j.end() || !tpl->is_object() || !tpl->contains("advice") || !(*tpl)["advice"].is_object() ||
      !(*tpl)["advice"].contains("strongest_residue") || !(*tpl)["advice"]["strongest_residue"].is_number_unsigned())
    return bad("template.advice.strongest_residue");
  p.strongest = (*tpl)["advice"]["strongest_residue"].get<uint32_t>();
  Status s = check_phase_profile(p);
  if (!s.ok()) return s.with_context("report '" + shown + "'");
  *out = std::move(p);
  return Status::Ok();
}

}  // namespace tools
}  // namespace phasekv
