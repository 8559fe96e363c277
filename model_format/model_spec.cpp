#include "model_spec.h"
#include "file_io.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace phasekv {

// Limits that no real Llama-family model reaches; values beyond them are treated as corrupt.
namespace limits {
constexpr uint32_t kVocab = 1u << 22;
constexpr uint32_t kDModel = 1u << 16;
constexpr uint32_t kLayers = 1024;
constexpr uint32_t kHeads = 1024;
constexpr uint32_t kHeadDim = 1024;
constexpr uint32_t kFfn = 1u << 20;
constexpr uint32_t kPositions = 1u << 24;
constexpr uint32_t kWindow = 4096;
constexpr uint32_t kLocal = 1u << 24;
constexpr size_t kDims = 4;
}  // namespace limits

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::Full: return "full";
    case MemoryKind::Sliding: return "sliding";
    case MemoryKind::Compressed: return "compressed";
  }
  return "unknown";
}

const char* gate_kind_name(GateKind g) {
  switch (g) {
    case GateKind::Uniform: return "uniform";
    case GateKind::Scalar: return "scalar";
    case GateKind::Vector: return "vector";
  }
  return "unknown";
}

const char* tokenizer_type_name(TokenizerType t) {
  switch (t) {
    case TokenizerType::None: return "none";
    case TokenizerType::ByteLevelBPE: return "byte-level BPE";
    case TokenizerType::SentencePiece: return "SentencePiece";
  }
  return "unknown";
}

bool RopeParams::operator==(const RopeParams& o) const {
  return theta == o.theta && dim == o.dim && style == o.style && scaling == o.scaling && factor == o.factor &&
         original_context == o.original_context && low_freq_factor == o.low_freq_factor &&
         high_freq_factor == o.high_freq_factor;
}

bool ModelConfig::operator==(const ModelConfig& o) const {
  return architecture == o.architecture && vocab_size == o.vocab_size && d_model == o.d_model &&
         n_layers == o.n_layers && n_heads == o.n_heads && n_kv_heads == o.n_kv_heads && head_dim == o.head_dim &&
         ffn_dim == o.ffn_dim && norm_eps == o.norm_eps && rope == o.rope && max_positions == o.max_positions &&
         tied_embeddings == o.tied_embeddings && bos_id == o.bos_id && eos_id == o.eos_id && pad_id == o.pad_id &&
         attn_bias == o.attn_bias && qk_norm == o.qk_norm;
}

bool AttentionMemory::operator==(const AttentionMemory& o) const {
  return kind == o.kind && window == o.window && stride == o.stride && local == o.local && gate == o.gate &&
         gate_maps == o.gate_maps && payload == o.payload && payload_maps == o.payload_maps &&
         kv_tied == o.kv_tied && entry_rope == o.entry_rope && entry_norm == o.entry_norm && sink == o.sink &&
         gap_accepted == o.gap_accepted && selection == o.selection && top_k == o.top_k;
}

std::string AttentionMemory::describe() const {
  switch (kind) {
    case MemoryKind::Full: return sink ? "full:sink=1" : "full";
    case MemoryKind::Sliding: return "sliding:L=" + std::to_string(local) + (sink ? ",sink=1" : "");
    case MemoryKind::Compressed: {
      std::string s = "compressed:W=" + std::to_string(window) + ",S=" + std::to_string(stride) +
                      ",L=" + std::to_string(local) + ",gate=" + gate_kind_name(gate);
      if (gate != GateKind::Uniform && gate_maps == MapSharing::PerOffset) s += ",gate_maps=offset";
      if (payload == PayloadSource::CompressorMap)
        s += payload_maps == MapSharing::PerOffset ? ",payload=map,payload_maps=offset" : ",payload=map";
      if (kv_tied) s += ",tied=1";
      if (entry_rope == EntryRope::RotateEntry) s += ",rope=entry";
      if (entry_norm) s += ",entry_norm=1";
      if (sink) s += ",sink=1";
      if (gap_accepted) s += ",gap=1";
      return s;
    }
  }
  return "unknown";
}

bool TensorInfo::operator==(const TensorInfo& o) const {
  return name == o.name && dtype == o.dtype && shape == o.shape && offset == o.offset && size == o.size;
}

uint64_t TensorInfo::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

bool TokenizerData::operator==(const TokenizerData& o) const {
  return type == o.type && model == o.model && pre == o.pre && tokens == o.tokens && scores == o.scores &&
         token_types == o.token_types && merges == o.merges && bos_id == o.bos_id && eos_id == o.eos_id &&
         eot_id == o.eot_id && pad_id == o.pad_id && unk_id == o.unk_id && add_bos == o.add_bos &&
         add_eos == o.add_eos && add_space_prefix == o.add_space_prefix;
}

bool Provenance::operator==(const Provenance& o) const {
  return source_file == o.source_file && source_format == o.source_format && source_name == o.source_name &&
         converter == o.converter;
}

const TensorInfo* ModelSpec::find_tensor(const std::string& name) const {
  for (const TensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<ExpectedTensor> llama_expected_tensors(const ModelConfig& c) {
  const uint64_t d = c.d_model, v = c.vocab_size, hd = c.head_dim, f = c.ffn_dim;
  const uint64_t q = uint64_t(c.n_heads) * hd, kv = uint64_t(c.n_kv_heads) * hd;
  std::vector<ExpectedTensor> out;
  out.push_back({"token_embd.weight", {v, d}});
  out.push_back({"output_norm.weight", {d}});
  if (!c.tied_embeddings) out.push_back({"output.weight", {v, d}});
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    out.push_back({p + "attn_norm.weight", {d}});
    out.push_back({p + "attn_q.weight", {q, d}});
    out.push_back({p + "attn_k.weight", {kv, d}});
    out.push_back({p + "attn_v.weight", {kv, d}});
    if (c.attn_bias) {
      out.push_back({p + "attn_q.bias", {q}});
      out.push_back({p + "attn_k.bias", {kv}});
      out.push_back({p + "attn_v.bias", {kv}});
    }
    if (c.qk_norm) {
      out.push_back({p + "attn_q_norm.weight", {hd}});
      out.push_back({p + "attn_k_norm.weight", {hd}});
    }
    out.push_back({p + "attn_output.weight", {d, q}});
    out.push_back({p + "ffn_norm.weight", {d}});
    out.push_back({p + "ffn_gate.weight", {f, d}});
    out.push_back({p + "ffn_up.weight", {f, d}});
    out.push_back({p + "ffn_down.weight", {d, f}});
  }
  return out;
}

std::vector<CompressorTensor> compressor_tensors(const ModelConfig& c, const AttentionMemory& m, uint32_t layer) {
  std::vector<CompressorTensor> out;
  const std::string p = "blk." + std::to_string(layer) + ".";
  const uint64_t d = c.d_model, hd = c.head_dim, kvd = uint64_t(c.n_kv_heads) * hd, W = m.window;
  if (m.sink) out.push_back({p + "attn_sink", {c.n_heads}, true, true});
  if (m.kind != MemoryKind::Compressed) return out;
  const uint64_t g = uint64_t(c.n_kv_heads) * (m.gate == GateKind::Vector ? hd : 1);
  for (const char* b : {"k", "v"}) {
    const std::string cmp = p + "cmp_" + b;
    if (m.gate != GateKind::Uniform) {
      out.push_back({cmp + "_gate.bias", {W, g}, true, true});
      if (m.gate_maps == MapSharing::PerOffset) out.push_back({cmp + "_gate.weight", {W, g, d}, true, false});
      else out.push_back({cmp + "_gate.weight", {g, d}, false, false});
    }
    if (m.payload == PayloadSource::CompressorMap) {
      if (m.payload_maps == MapSharing::PerOffset) out.push_back({cmp + ".weight", {W, kvd, d}, true, false});
      else out.push_back({cmp + ".weight", {kvd, d}, true, false});
    }
  }
  if (m.entry_norm) out.push_back({p + "cmp_k_norm.weight", {hd}, true, true});
  return out;
}

namespace {

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Status check_range(const char* field, uint64_t value, uint64_t lo, uint64_t hi) {
  if (value < lo || value > hi)
    return make_error(StatusCode::kInvalidFile, "%s = %llu is outside [%llu, %llu]", field,
                      (unsigned long long)value, (unsigned long long)lo, (unsigned long long)hi);
  return Status::Ok();
}

Status check_token_id(const char* field, int32_t id, uint64_t n) {
  if (id < -1 || (id >= 0 && uint64_t(id) >= n))
    return make_error(StatusCode::kInvalidFile, "%s = %d is not a token id (vocabulary has %llu tokens)", field, id,
                      (unsigned long long)n);
  return Status::Ok();
}

Status validate_config(const ModelConfig& c) {
  if (c.architecture != "llama" && c.architecture != "qwen2" && c.architecture != "qwen3")
    return make_error(StatusCode::kUnsupported,
                      "config.architecture = '%s' is not supported (PhaseKV runs 'llama', 'qwen2', 'qwen3')",
                      display_escape(c.architecture).c_str());
  PKV_RETURN_IF_ERROR(check_range("config.vocab_size", c.vocab_size, 1, limits::kVocab));
  PKV_RETURN_IF_ERROR(check_range("config.d_model", c.d_model, 1, limits::kDModel));
  PKV_RETURN_IF_ERROR(check_range("config.n_layers", c.n_layers, 1, limits::kLayers));
  PKV_RETURN_IF_ERROR(check_range("config.n_heads", c.n_heads, 1, limits::kHeads));
  PKV_RETURN_IF_ERROR(check_range("config.n_kv_heads", c.n_kv_heads, 1, limits::kHeads));
  PKV_RETURN_IF_ERROR(check_range("config.head_dim", c.head_dim, 1, limits::kHeadDim));
  PKV_RETURN_IF_ERROR(check_range("config.ffn_dim", c.ffn_dim, 1, limits::kFfn));
  PKV_RETURN_IF_ERROR(check_range("config.max_positions", c.max_positions, 1, limits::kPositions));
  if (c.n_heads % c.n_kv_heads != 0)
    return make_error(StatusCode::kInvalidFile, "config.n_heads = %u is not a multiple of config.n_kv_heads = %u",
                      c.n_heads, c.n_kv_heads);
  if (!(c.norm_eps > 0.0f && c.norm_eps < 1.0f))
    return make_error(StatusCode::kInvalidFile, "config.norm_eps = %g is not in (0, 1)", double(c.norm_eps));
  if (!(c.rope.theta > 0.0f && std::isfinite(c.rope.theta)))
    return make_error(StatusCode::kInvalidFile, "config.rope.theta = %g is not a positive number",
                      double(c.rope.theta));
  if (c.rope.dim == 0 || c.rope.dim > c.head_dim || c.rope.dim % 2 != 0)
    return make_error(StatusCode::kInvalidFile, "config.rope.dim = %u must be even and in [2, head_dim = %u]",
                      c.rope.dim, c.head_dim);
  if (uint8_t(c.rope.style) > uint8_t(RopeStyle::NeoX))
    return make_error(StatusCode::kInvalidFile, "config.rope.style = %u is unknown", unsigned(c.rope.style));
  if (uint8_t(c.rope.scaling) > uint8_t(RopeScaling::Llama3))
    return make_error(StatusCode::kInvalidFile, "config.rope.scaling = %u is unknown", unsigned(c.rope.scaling));
  if (c.rope.scaling != RopeScaling::None && !(c.rope.factor > 0.0f && std::isfinite(c.rope.factor)))
    return make_error(StatusCode::kInvalidFile, "config.rope.factor = %g is not a positive number",
                      double(c.rope.factor));
  PKV_RETURN_IF_ERROR(check_token_id("config.bos_id", c.bos_id, c.vocab_size));
  PKV_RETURN_IF_ERROR(check_token_id("config.eos_id", c.eos_id, c.vocab_size));
  PKV_RETURN_IF_ERROR(check_token_id("config.pad_id", c.pad_id, c.vocab_size));
  return Status::Ok();
}

Status validate_tokenizer(const TokenizerData& t, const ModelConfig& c) {
  if (uint8_t(t.type) > uint8_t(TokenizerType::SentencePiece))
    return make_error(StatusCode::kInvalidFile, "tokenizer.type = %u is unknown", unsigned(t.type));
  if (t.type == TokenizerType::None) return Status::Ok();
  const uint64_t n = t.tokens.size();
  if (n == 0 || n > c.vocab_size)
    return make_error(StatusCode::kInvalidFile, "tokenizer.tokens has %llu entries; config.vocab_size is %u",
                      (unsigned long long)n, c.vocab_size);
  if (!t.scores.empty() && t.scores.size() != n)
    return make_error(StatusCode::kInvalidFile, "tokenizer.scores has %zu entries, tokenizer.tokens has %llu",
                      t.scores.size(), (unsigned long long)n);
  if (!t.token_types.empty() && t.token_types.size() != n)
    return make_error(StatusCode::kInvalidFile, "tokenizer.token_types has %zu entries, tokenizer.tokens has %llu",
                      t.token_types.size(), (unsigned long long)n);
  if (t.type == TokenizerType::ByteLevelBPE && t.merges.empty())
    return make_error(StatusCode::kInvalidFile, "tokenizer.merges is empty for a byte-level BPE tokenizer");
  PKV_RETURN_IF_ERROR(check_token_id("tokenizer.bos_id", t.bos_id, n));
  PKV_RETURN_IF_ERROR(check_token_id("tokenizer.eos_id", t.eos_id, n));
  PKV_RETURN_IF_ERROR(check_token_id("tokenizer.eot_id", t.eot_id, n));
  PKV_RETURN_IF_ERROR(check_token_id("tokenizer.pad_id", t.pad_id, n));
  PKV_RETURN_IF_ERROR(check_token_id("tokenizer.unk_id", t.unk_id, n));
  return Status::Ok();
}

Status validate_tensors(const ModelSpec& spec, uint64_t blob_size) {
  std::unordered_set<std::string> names;
  std::vector<const TensorInfo*> by_offset;
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const TensorInfo& t = spec.tensors[i];
    if (t.name.empty()) return make_error(StatusCode::kInvalidFile, "tensors[%zu].name is empty", i);
    const char* n = t.name.c_str();
    if (!names.insert(t.name).second)
      return make_error(StatusCode::kInvalidFile, "tensor '%s' appears twice", n);
    if (!dtype_info(uint8_t(t.dtype)))
      return make_error(StatusCode::kInvalidFile, "tensor '%s': dtype = %u is unknown", n, unsigned(t.dtype));
    if (t.shape.empty() || t.shape.size() > limits::kDims)
      return make_error(StatusCode::kInvalidFile, "tensor '%s': shape has %zu dimensions (1..%zu allowed)", n,
                        t.shape.size(), limits::kDims);
    uint64_t bytes = 0;
    Status st = tensor_byte_size(t.dtype, t.shape, &bytes);
    if (!st.ok()) return st.with_context("tensor '" + t.name + "' " + shape_str(t.shape));
    if (bytes != t.size)
      return make_error(StatusCode::kInvalidFile, "tensor '%s': size = %llu bytes, but %s x %s needs %llu", n,
                        (unsigned long long)t.size, dtype_name(t.dtype), shape_str(t.shape).c_str(),
                        (unsigned long long)bytes);
    if (t.offset % kTensorAlign != 0)
      return make_error(StatusCode::kInvalidFile, "tensor '%s': offset = %llu is not a multiple of %llu", n,
                        (unsigned long long)t.offset, (unsigned long long)kTensorAlign);
    if (t.offset > blob_size || t.size > blob_size - t.offset)
      return make_error(StatusCode::kInvalidFile,
                        "tensor '%s': bytes [%llu, %llu) lie past the end of the tensor blob (%llu bytes)", n,
                        (unsigned long long)t.offset, (unsigned long long)t.offset + t.size,
                        (unsigned long long)blob_size);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo* a = by_offset[i - 1];
    const TensorInfo* b = by_offset[i];
    if (a->offset + a->size > b->offset)
      return make_error(StatusCode::kInvalidFile, "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                        display_escape(a->name).c_str(), (unsigned long long)a->offset, (unsigned long long)(a->offset + a->size),
                        display_escape(b->name).c_str(), (unsigned long long)b->offset, (unsigned long long)(b->offset + b->size));
  }
  for (const ExpectedTensor& e : llama_expected_tensors(spec.config)) {
    const TensorInfo* t = spec.find_tensor(e.name);
    if (!t) return make_error(StatusCode::kInvalidFile, "required tensor '%s' is missing", display_escape(e.name).c_str());
    if (t->shape != e.shape)
      return make_error(StatusCode::kInvalidFile, "tensor '%s' has shape %s; the config implies %s", display_escape(e.name).c_str(),
                        shape_str(t->shape).c_str(), shape_str(e.shape).c_str());
  }
  for (uint32_t l = 0; l < spec.layers.size(); ++l) {
    for (const CompressorTensor& e : compressor_tensors(spec.config, spec.layers[l], l)) {
      const TensorInfo* t = spec.find_tensor(e.name);
      if (!t) {
        if (!e.required) continue;
        return make_error(StatusCode::kInvalidFile, "layers[%u] (%s) needs tensor '%s' %s, which is missing", l,
                          spec.layers[l].describe().c_str(), display_escape(e.name).c_str(), shape_str(e.shape).c_str());
      }
      if (t->shape != e.shape)
        return make_error(StatusCode::kInvalidFile, "tensor '%s' has shape %s; layers[%u] (%s) implies %s",
                          display_escape(e.name).c_str(), shape_str(t->shape).c_str(), l, spec.layers[l].describe().c_str(),
                          shape_str(e.shape).c_str());
      if (e.f32_only && t->dtype != DType::F32)
        return make_error(StatusCode::kInvalidFile, "tensor '%s' is %s; it must be F32", display_escape(e.name).c_str(),
                          dtype_name(t->dtype));
    }
  }
  return Status::Ok();
}

}  // namespace

Status validate_memory(const AttentionMemory& m, uint32_t layer) {
  const unsigned l = layer;
  switch (m.kind) {
    case MemoryKind::Full:
      if (m.selection != Selection::AllEntries || m.gate != GateKind::Uniform)
        return make_error(StatusCode::kInvalidFile, "layers[%u]: a full memory has no gate or selection", l);
      if (m.window || m.stride || m.local)
        return make_error(StatusCode::kInvalidFile, "layers[%u]: a full memory has no W/S/L (got W=%u S=%u L=%u)",
                          l, m.window, m.stride, m.local);
      return Status::Ok();
    case MemoryKind::Sliding:
      if (m.local < 1 || m.local > limits::kLocal)
        return make_error(StatusCode::kInvalidFile, "layers[%u]: sliding L = %u is outside [1, %u]", l, m.local,
                          limits::kLocal);
      if (m.window || m.stride)
        return make_error(StatusCode::kInvalidFile, "layers[%u]: a sliding memory has no W/S (got W=%u S=%u)", l,
                          m.window, m.stride);
      return Status::Ok();
    case MemoryKind::Compressed:
      if (m.stride < 1) return make_error(StatusCode::kInvalidFile, "layers[%u]: stride S = 0 (must be >= 1)", l);
      if (m.window < m.stride)
        return make_error(StatusCode::kInvalidFile, "layers[%u]: window W = %u is smaller than stride S = %u", l,
                          m.window, m.stride);
      if (m.window > limits::kWindow)
        return make_error(StatusCode::kInvalidFile, "layers[%u]: window W = %u exceeds %u", l, m.window,
                          limits::kWindow);
      if (m.local > limits::kLocal)
        return make_error(StatusCode::kInvalidFile, "layers[%u]: local L = %u exceeds %u", l, m.local,
                          limits::kLocal);
      if (m.local + 1 < m.stride && !m.gap_accepted)
        return make_error(StatusCode::kInvalidFile,
                          "layers[%u]: local L = %u < S-1 = %u leaves tokens of the open window invisible "
                          "(set the gap flag if that is intended)",
                          l, m.local, m.stride - 1);
      if (uint8_t(m.gate) > uint8_t(GateKind::Vector) || uint8_t(m.gate_maps) > 1 || uint8_t(m.payload) > 1 ||
          uint8_t(m.payload_maps) > 1 || uint8_t(m.entry_rope) > 1 || uint8_t(m.selection) > 1)
        return make_error(StatusCode::kInvalidFile, "layers[%u]: an enum field of the compressed memory is unknown",
                          l);
      if (m.entry_norm && m.entry_rope != EntryRope::RotateEntry)
        return make_error(StatusCode::kInvalidFile,
                          "layers[%u]: entry_norm is set but entry_rope is rotate-tokens (the entry RMSNorm "
                          "applies to un-rotated pooled keys only)",
                          l);
      if (m.kv_tied)
        return make_error(StatusCode::kUnsupported,
                          "layers[%u]: kv_tied (one compressor branch for K and V) is not implemented in this "
                          "version",
                          l);
      if (m.selection != Selection::AllEntries)
        return make_error(StatusCode::kUnsupported, "layers[%u]: selection = indexer top-k is not implemented", l);
      return Status::Ok();
  }
  return make_error(StatusCode::kInvalidFile, "layers[%u]: memory kind = %u is unknown", l, unsigned(m.kind));
}

Status validate_spec(const ModelSpec& spec, uint64_t blob_size) {
  PKV_RETURN_IF_ERROR(validate_config(spec.config));
  if (spec.layers.size() != spec.config.n_layers)
    return make_error(StatusCode::kInvalidFile, "layers has %zu memory descriptors; config.n_layers is %u",
                      spec.layers.size(), spec.config.n_layers);
  for (uint32_t i = 0; i < spec.layers.size(); ++i) PKV_RETURN_IF_ERROR(validate_memory(spec.layers[i], i));
  PKV_RETURN_IF_ERROR(validate_tensors(spec, blob_size));
  PKV_RETURN_IF_ERROR(validate_tokenizer(spec.tokenizer, spec.config));
  const BlobHash& h = spec.blob_hash;
  switch (h.algorithm) {
    case HashAlgorithm::None:
      if (!h.digest.empty())
        return make_error(StatusCode::kInvalidFile, "integrity.blob_hash has %zu bytes but no algorithm",
                          h.digest.size());
      break;
    case HashAlgorithm::XXH3_128:
      if (h.digest.size() != 16)
        return make_error(StatusCode::kInvalidFile, "integrity.blob_hash has %zu bytes; XXH3_128 has 16",
                          h.digest.size());
      break;
    default:
      return make_error(StatusCode::kUnsupported, "integrity.blob_hash_algorithm = %u is unknown to this build",
                        unsigned(h.algorithm));
  }
  return Status::Ok();
}

}  // namespace phasekv
