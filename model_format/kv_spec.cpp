#include "kv_spec.h"

#include <cerrno>
#include <cstdlib>

namespace phasekv {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

bool parse_u32(const std::string& s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  for (char ch : s)
    if (ch < '0' || ch > '9') return false;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (v > 0xffffffffull) return false;
  *out = uint32_t(v);
  return true;
}

bool is_kind(const std::string& s) { return s == "full" || s == "sliding" || s == "compressed"; }

Status bad(const std::string& spec, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "--kv '" + spec + "': " + why);
}

Status parse_layers(const std::string& spec, const std::string& text, size_t n_layers, std::vector<bool>* sel) {
  sel->assign(n_layers, false);
  if (text == "all") {
    sel->assign(n_layers, true);
    return Status::Ok();
  }
  for (const std::string& range : split(text, ',')) {
    std::vector<std::string> ends = split(range, '-');
    uint32_t a = 0, b = 0;
    if (ends.size() == 1 && parse_u32(ends[0], &a)) {
      b = a;
    } else if (ends.size() != 2 || !parse_u32(ends[0], &a) || !parse_u32(ends[1], &b)) {
      return bad(spec, "layer range '" + range + "' is not N or N-M");
    }
    if (a > b) return bad(spec, "layer range '" + range + "' is reversed");
    if (b >= n_layers)
      return bad(spec, "layer " + std::to_string(b) + " does not exist (the model has " + std::to_string(n_layers) +
                           " layers, 0-" + std::to_string(n_layers - 1) + ")");
    for (uint32_t i = a; i <= b; ++i) (*sel)[i] = true;
  }
  return Status::Ok();
}

}  // namespace

Status apply_kv_spec(const std::string& spec, std::vector<AttentionMemory>* layers) {
  if (layers->empty()) return bad(spec, "the model has no layers");
  std::vector<std::string> parts = split(spec, ':');
  std::string layer_text = "all";
  size_t k = 0;
  if (!parts.empty() && !is_kind(parts[0])) {
    layer_text = parts[0];
    k = 1;
  }
  if (k >= parts.size() || !is_kind(parts[k]))
    return bad(spec, "expected a kind (full, sliding, compressed)" +
                         (k < parts.size() ? " but found '" + parts[k] + "'" : std::string()));
  const std::string kind = parts[k];
  if (parts.size() > k + 2) return bad(spec, "too many ':' separators");
  const std::string params = parts.size() == k + 2 ? parts[k + 1] : "";

  std::vector<bool> sel;
  PKV_RETURN_IF_ERROR(parse_layers(spec, layer_text, layers->size(), &sel));

  AttentionMemory m;
  bool have_w = false, have_s = false, have_l = false;
  if (kind == "sliding") m.kind = MemoryKind::Sliding;
  if (kind == "compressed") m.kind = MemoryKind::Compressed;
  if (!params.empty()) {
    if (kind == "full") return bad(spec, "full takes no parameters");
    for (const std::string& kv : split(params, ',')) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos) return bad(spec, "parameter '" + kv + "' is not KEY=VALUE");
      const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
      uint32_t num = 0;
      const bool is_num = parse_u32(val, &num);
      if (key == "L") {
        if (!is_num) return bad(spec, "L = '" + val + "' is not a non-negative integer");
        m.local = num;
        have_l = true;
      } else if (kind == "compressed" && key == "W") {
        if (!is_num) return bad(spec, "W = '" + val + "' is not a non-negative integer");
        m.window = num;
        have_w = true;
      } else if (kind == "compressed" && key == "S") {
        if (!is_num) return bad(spec, "S = '" + val + "' is not a non-negative integer");
        m.stride = num;
        have_s = true;
      } else if (kind == "compressed" && key == "gate") {
        if (val == "uniform") {
          m.gate = GateKind::Uniform;
        } else {
          return bad(spec, "gate = '" + val + "' is not supported here (this version converts gate=uniform)");
        }
      } else if (kind == "compressed" && key == "rope") {
        if (val == "token") m.entry_rope = EntryRope::RotateTokens;
        else if (val == "entry") m.entry_rope = EntryRope::RotateEntry;
        else return bad(spec, "rope = '" + val + "' is not token or entry");
      } else if (kind == "compressed" && (key == "sink" || key == "gap")) {
        if (val != "0" && val != "1") return bad(spec, key + " = '" + val + "' is not 0 or 1");
        (key == "sink" ? m.sink : m.gap_accepted) = val == "1";
      } else {
        return bad(spec, "unknown parameter '" + key + "' for " + kind);
      }
    }
  }
  if (kind == "sliding" && !have_l) return bad(spec, "sliding needs L=N");
  if (kind == "compressed") {
    if (!have_w || !have_s) return bad(spec, "compressed needs W=.. and S=..");
    if (!have_l) m.local = m.stride > 0 ? m.stride - 1 : 0;
  }
  Status st = validate_memory(m, 0);
  if (!st.ok()) {
    // Report against the spec, not a file field.
    std::string msg = st.message();
    const std::string prefix = "layers[0]: ";
    if (msg.compare(0, prefix.size(), prefix) == 0) msg = msg.substr(prefix.size());
    return Status(StatusCode::kInvalidArgument, "--kv '" + spec + "': " + msg);
  }
  for (size_t i = 0; i < layers->size(); ++i)
    if (sel[i]) (*layers)[i] = m;
  return Status::Ok();
}

Status apply_kv_specs(const std::vector<std::string>& specs, std::vector<AttentionMemory>* layers) {
  for (const std::string& s : specs) PKV_RETURN_IF_ERROR(apply_kv_spec(s, layers));
  return Status::Ok();
}

}  // namespace phasekv
