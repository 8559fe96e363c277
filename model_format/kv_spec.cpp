#include "kv_spec.h"

#include <algorithm>
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

Status apply_kv_spec(const std::string& spec, std::vector<AttentionMemory>* layers, std::vector<PlantedGate>* planted) {
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
  // Everything after the kind is PARAMS; a planted gate ("gate=planted:K=2,V=5") brings its
  // own ':' and must be the last parameter.
  std::string params;
  if (parts.size() > k + 1) {
    size_t at = 0;
    for (size_t i = 0; i <= k; ++i) at += parts[i].size() + 1;
    params = spec.substr(at);
    const size_t planted = params.find("gate=planted:");
    const std::string head = planted == std::string::npos ? params : params.substr(0, planted);
    if (head.find(':') != std::string::npos) return bad(spec, "too many ':' separators");
  }
  std::vector<bool> sel;
  PKV_RETURN_IF_ERROR(parse_layers(spec, layer_text, layers->size(), &sel));

  AttentionMemory m;
  PlantedGate plant;
  bool have_w = false, have_s = false, have_l = false;
  if (kind == "sliding") m.kind = MemoryKind::Sliding;
  if (kind == "compressed") m.kind = MemoryKind::Compressed;
  std::string gate_params;
  std::string plain = params;
  const size_t planted_at = params.find("gate=planted:");
  if (planted_at != std::string::npos) {
    if (kind != "compressed") return bad(spec, "gate= is a compressed parameter");
    gate_params = params.substr(planted_at + 13);
    plain = params.substr(0, planted_at);
    if (!plain.empty() && plain.back() == ',') plain.pop_back();
    plant.on = true;
  }
  if (!plain.empty()) {
    for (const std::string& kv : split(plain, ',')) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos) return bad(spec, "parameter '" + kv + "' is not KEY=VALUE");
      const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
      uint32_t num = 0;
      const bool is_num = parse_u32(val, &num);
      const bool cmp = kind == "compressed";
      auto flag = [&](bool* out) -> Status {
        if (val != "0" && val != "1") return bad(spec, key + " = '" + val + "' is not 0 or 1");
        *out = val == "1";
        return Status::Ok();
      };
      auto sharing = [&](MapSharing* out) -> Status {
        if (val == "shared") *out = MapSharing::Shared;
        else if (val == "offset") *out = MapSharing::PerOffset;
        else return bad(spec, key + " = '" + val + "' is not shared or offset");
        return Status::Ok();
      };
      if (key == "L" && kind != "full") {
        if (!is_num) return bad(spec, "L = '" + val + "' is not a non-negative integer");
        m.local = num;
        have_l = true;
      } else if (cmp && key == "W") {
        if (!is_num) return bad(spec, "W = '" + val + "' is not a non-negative integer");
        m.window = num;
        have_w = true;
      } else if (cmp && key == "S") {
        if (!is_num) return bad(spec, "S = '" + val + "' is not a non-negative integer");
        m.stride = num;
        have_s = true;
      } else if (cmp && key == "gate") {
        if (val == "uniform") m.gate = GateKind::Uniform;
        else if (val == "scalar") m.gate = GateKind::Scalar;
        else if (val == "vector") m.gate = GateKind::Vector;
        else
          return bad(spec, "gate = '" + val +
                               "' is not uniform, scalar, vector, planted:K=k,V=v[,strength=x] or "
                               "planted:weak=a[,b...][,strength=x]");
      } else if (cmp && key == "gate_maps") {
        PKV_RETURN_IF_ERROR(sharing(&m.gate_maps));
      } else if (cmp && key == "payload") {
        if (val == "layer") m.payload = PayloadSource::LayerProjection;
        else if (val == "map") m.payload = PayloadSource::CompressorMap;
        else return bad(spec, "payload = '" + val + "' is not layer or map");
      } else if (cmp && key == "payload_maps") {
        PKV_RETURN_IF_ERROR(sharing(&m.payload_maps));
      } else if (cmp && key == "rope") {
        if (val == "token") m.entry_rope = EntryRope::RotateTokens;
        else if (val == "entry") m.entry_rope = EntryRope::RotateEntry;
        else return bad(spec, "rope = '" + val + "' is not token or entry");
      } else if (cmp && key == "entry_norm") {
        PKV_RETURN_IF_ERROR(flag(&m.entry_norm));
      } else if (cmp && key == "gap") {
        PKV_RETURN_IF_ERROR(flag(&m.gap_accepted));
      } else if (key == "sink") {
        PKV_RETURN_IF_ERROR(flag(&m.sink));
      } else {
        return bad(spec, "unknown parameter '" + key + "' for " + kind);
      }
    }
  }
  if (plant.on) {
    // K=k,V=v | weak=a[,b...] ; strength=x anywhere. A bare number continues the weak list.
    bool in_weak = false;
    for (const std::string& kv : split(gate_params, ',')) {
      const size_t eq = kv.find('=');
      const std::string key = eq == std::string::npos ? "" : kv.substr(0, eq);
      const std::string val = eq == std::string::npos ? kv : kv.substr(eq + 1);
      uint32_t num = 0;
      if (key.empty() && in_weak) {
        if (!parse_u32(val, &num)) return bad(spec, "planted gate: weak offset '" + val + "' is not an integer");
        plant.weak.push_back(num);
      } else if (key == "K" || key == "V") {
        if (!parse_u32(val, &num)) return bad(spec, "planted gate: " + key + " = '" + val + "' is not an integer");
        (key == "K" ? plant.k_offset : plant.v_offset) = int32_t(num);
        in_weak = false;
      } else if (key == "weak") {
        if (!parse_u32(val, &num)) return bad(spec, "planted gate: weak offset '" + val + "' is not an integer");
        plant.weak.push_back(num);
        in_weak = true;
      } else if (key == "strength") {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(val.c_str(), &end);
        if (val.empty() || *end != '\0' || errno != 0 || !(x > 0.0) || x > 80.0)
          return bad(spec, "planted gate: strength = '" + val + "' is not a number in (0, 80]");
        plant.strength = float(x);
        in_weak = false;
      } else {
        return bad(spec, "planted gate: '" + kv + "' is not K=k, V=v, weak=a[,b...] or strength=x");
      }
    }
    const bool kv_form = plant.k_offset >= 0 || plant.v_offset >= 0;
    if (kv_form == !plant.weak.empty())
      return bad(spec, "planted gate: give either K=k,V=v or weak=a[,b...]");
    if (kv_form && (plant.k_offset < 0 || plant.v_offset < 0))
      return bad(spec, "planted gate: K=k needs V=v and the other way round");
    m.gate = GateKind::Scalar;
    m.gate_maps = MapSharing::Shared;
  }
  if (kind == "sliding" && !have_l) return bad(spec, "sliding needs L=N");
  if (kind == "compressed") {
    if (!have_w || !have_s) return bad(spec, "compressed needs W=.. and S=..");
    if (!have_l) m.local = m.stride > 0 ? m.stride - 1 : 0;
  }
  if (plant.on) {
    auto in_window = [&](uint32_t o) { return o < m.window; };
    if (plant.k_offset >= 0 && (!in_window(uint32_t(plant.k_offset)) || !in_window(uint32_t(plant.v_offset))))
      return bad(spec, "planted gate: K and V must be offsets in [0, W-1 = " + std::to_string(m.window - 1) + "]");
    for (uint32_t o : plant.weak)
      if (!in_window(o))
        return bad(spec, "planted gate: weak offset " + std::to_string(o) + " is outside [0, W-1 = " +
                             std::to_string(m.window - 1) + "]");
    if (plant.weak.size() >= m.window) return bad(spec, "planted gate: every offset is weak");
  }
  Status st = validate_memory(m, 0);
  if (!st.ok()) {
    // Report against the spec, not a file field.
    std::string msg = st.message();
    const std::string prefix = "layers[0]: ";
    if (msg.compare(0, prefix.size(), prefix) == 0) msg = msg.substr(prefix.size());
    return Status(StatusCode::kInvalidArgument, "--kv '" + spec + "': " + msg);
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    if (!sel[i]) continue;
    (*layers)[i] = m;
    if (planted) {
      planted->resize(layers->size());
      (*planted)[i] = plant;
    }
  }
  return Status::Ok();
}

Status apply_kv_specs(const std::vector<std::string>& specs, std::vector<AttentionMemory>* layers,
                      std::vector<PlantedGate>* planted) {
  if (planted) planted->assign(layers->size(), PlantedGate());
  for (const std::string& s : specs) PKV_RETURN_IF_ERROR(apply_kv_spec(s, layers, planted));
  return Status::Ok();
}

void planted_gate_biases(const PlantedGate& p, uint32_t window, uint32_t n_kv_heads, std::vector<float>* bias_k,
                         std::vector<float>* bias_v) {
  bias_k->assign(size_t(window) * n_kv_heads, 0.0f);
  bias_v->assign(size_t(window) * n_kv_heads, 0.0f);
  for (uint32_t i = 0; i < window; ++i) {
    float bk = 0.0f, bv = 0.0f;
    if (p.k_offset >= 0) {
      bk = int32_t(i) == p.k_offset ? p.strength : 0.0f;
      bv = int32_t(i) == p.v_offset ? p.strength : 0.0f;
    } else if (std::find(p.weak.begin(), p.weak.end(), i) != p.weak.end()) {
      bk = bv = -p.strength;
    }
    for (uint32_t h = 0; h < n_kv_heads; ++h) {
      (*bias_k)[size_t(i) * n_kv_heads + h] = bk;
      (*bias_v)[size_t(i) * n_kv_heads + h] = bv;
    }
  }
}

}  // namespace phasekv
