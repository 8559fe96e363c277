#include "gguf_import.h"
#include "file_io.h"

#include <cmath>
#include <cstring>
#include <cstdio>

#include "kv_spec.h"
#include "model_file.h"

namespace phasekv {

namespace {

bool ggml_to_dtype(uint32_t ggml_type, DType* out) {
  switch (ggml_type) {
    case 0: *out = DType::F32; return true;
    case 1: *out = DType::F16; return true;
    case 2: *out = DType::Q4_0; return true;
    case 3: *out = DType::Q4_1; return true;
    case 6: *out = DType::Q5_0; return true;
    case 7: *out = DType::Q5_1; return true;
    case 8: *out = DType::Q8_0; return true;
    case 10: *out = DType::Q2_K; return true;
    case 11: *out = DType::Q3_K; return true;
    case 12: *out = DType::Q4_K; return true;
    case 13: *out = DType::Q5_K; return true;
    case 14: *out = DType::Q6_K; return true;
    case 30: *out = DType::BF16; return true;
    default: return false;
  }
}

Status require_u32(const GgufFile& g, const std::string& key, uint32_t* out) {
  bool found = false;
  PKV_RETURN_IF_ERROR(g.get_u32(key, out, &found));
  if (!found) return make_error(StatusCode::kInvalidFile, "required metadata '%s' is missing", display_escape(key).c_str());
  return Status::Ok();
}

Status import_config(const GgufFile& g, ModelConfig* c, bool* has_rope_freqs) {
  bool found = false;
  std::string arch;
  PKV_RETURN_IF_ERROR(g.get_string("general.architecture", &arch, &found));
  if (!found) return make_error(StatusCode::kInvalidFile, "required metadata 'general.architecture' is missing");
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3")
    return make_error(StatusCode::kUnsupported,
                      "general.architecture = '%s' is not supported; PhaseKV imports llama, qwen2 and qwen3 GGUF "
                      "files",
                      display_escape(arch).c_str());
  c->architecture = arch;
  // llama.cpp's converter permutes llama's q/k rows for GGML's "normal" (interleaved) RoPE and
  // leaves Qwen's as trained: those run NeoX RoPE (pairs i, i + dim/2), as llama.cpp does.
  const bool qwen = arch != "llama";
  c->attn_bias = arch == "qwen2";
  c->qk_norm = arch == "qwen3";
  const std::string p = arch + ".";
  PKV_RETURN_IF_ERROR(require_u32(g, p + "embedding_length", &c->d_model));
  PKV_RETURN_IF_ERROR(require_u32(g, p + "block_count", &c->n_layers));
  PKV_RETURN_IF_ERROR(require_u32(g, p + "attention.head_count", &c->n_heads));
  PKV_RETURN_IF_ERROR(require_u32(g, p + "feed_forward_length", &c->ffn_dim));
  PKV_RETURN_IF_ERROR(require_u32(g, p + "context_length", &c->max_positions));
  c->n_kv_heads = c->n_heads;
  PKV_RETURN_IF_ERROR(g.get_u32(p + "attention.head_count_kv", &c->n_kv_heads, &found));
  if (c->n_heads == 0) return make_error(StatusCode::kInvalidFile, "metadata '%sattention.head_count' = 0", p.c_str());
  // These size what the import allocates before validate_spec sees the spec (one memory per
  // layer, planted gate biases [W, n_kv_heads] per layer): hold them to its limits first.
  constexpr uint32_t kMaxLayers = 1024, kMaxHeads = 1024;  // model_spec.cpp limits::kLayers, kHeads
  if (c->n_layers > kMaxLayers)
    return make_error(StatusCode::kInvalidFile, "metadata '%sblock_count' = %u exceeds %u", p.c_str(), c->n_layers,
                      kMaxLayers);
  if (c->n_kv_heads > kMaxHeads)
    return make_error(StatusCode::kInvalidFile, "metadata '%sattention.head_count_kv' = %u exceeds %u", p.c_str(),
                      c->n_kv_heads, kMaxHeads);
  uint32_t key_len = 0, value_len = 0;
  PKV_RETURN_IF_ERROR(g.get_u32(p + "attention.key_length", &key_len, &found));
  if (!found) {
    if (c->d_model % c->n_heads != 0)
      return make_error(StatusCode::kInvalidFile, "embedding_length %u is not a multiple of head_count %u",
                        c->d_model, c->n_heads);
    key_len = c->d_model / c->n_heads;
  }
  value_len = key_len;
  PKV_RETURN_IF_ERROR(g.get_u32(p + "attention.value_length", &value_len, &found));
  if (value_len != key_len)
    return make_error(StatusCode::kUnsupported, "attention.key_length %u != attention.value_length %u", key_len,
                      value_len);
  c->head_dim = key_len;
  c->norm_eps = 1e-5f;
  PKV_RETURN_IF_ERROR(g.get_f32(p + "attention.layer_norm_rms_epsilon", &c->norm_eps, &found));
  c->rope.theta = 10000.0f;
  PKV_RETURN_IF_ERROR(g.get_f32(p + "rope.freq_base", &c->rope.theta, &found));
  c->rope.dim = c->head_dim;
  PKV_RETURN_IF_ERROR(g.get_u32(p + "rope.dimension_count", &c->rope.dim, &found));
  c->rope.style = qwen ? RopeStyle::NeoX : RopeStyle::Interleaved;
  std::string scaling;
  PKV_RETURN_IF_ERROR(g.get_string(p + "rope.scaling.type", &scaling, &found));
  if (!found || scaling == "none") {
    c->rope.scaling = RopeScaling::None;
  } else if (scaling == "linear") {
    c->rope.scaling = RopeScaling::Linear;
  } else if (scaling == "yarn") {
    c->rope.scaling = RopeScaling::YaRN;
  } else {
    return make_error(StatusCode::kUnsupported, "metadata '%srope.scaling.type' = '%s' is not supported", p.c_str(),
                      scaling.c_str());
  }
  PKV_RETURN_IF_ERROR(g.get_f32(p + "rope.scaling.factor", &c->rope.factor, &found));
  PKV_RETURN_IF_ERROR(g.get_u32(p + "rope.scaling.original_context_length", &c->rope.original_context, &found));
  // Llama 3.x files carry their frequency factors as a tensor; the tensor is imported as is.
  *has_rope_freqs = g.find_tensor("rope_freqs.weight") != nullptr;
  if (*has_rope_freqs && c->rope.scaling == RopeScaling::None) c->rope.scaling = RopeScaling::Llama3;

  const GgufTensor* embd = g.find_tensor("token_embd.weight");
  if (!embd || embd->ne.size() != 2)
    return make_error(StatusCode::kInvalidFile, "tensor 'token_embd.weight' is missing or not 2-D");
  c->vocab_size = uint32_t(embd->ne[1]);
  uint32_t vocab_meta = 0;
  PKV_RETURN_IF_ERROR(g.get_u32(p + "vocab_size", &vocab_meta, &found));
  if (found && vocab_meta != c->vocab_size)
    return make_error(StatusCode::kInvalidFile, "metadata '%svocab_size' = %u but token_embd.weight has %u rows",
                      p.c_str(), vocab_meta, c->vocab_size);
  c->tied_embeddings = g.find_tensor("output.weight") == nullptr;
  return Status::Ok();
}

Status import_tokenizer(const GgufFile& g, TokenizerData* t) {
  bool found = false;
  std::string model;
  PKV_RETURN_IF_ERROR(g.get_string("tokenizer.ggml.model", &model, &found));
  if (!found) return Status::Ok();  // a model without a tokenizer (tensors only)
  t->model = model;
  if (model == "gpt2") {
    t->type = TokenizerType::ByteLevelBPE;
  } else if (model == "llama") {
    t->type = TokenizerType::SentencePiece;
  } else if (model == "none" || model.empty()) {
    t->type = TokenizerType::None;
  } else {
    return make_error(StatusCode::kUnsupported,
                      "tokenizer.ggml.model = '%s' is not supported (gpt2 and llama are)", display_escape(model).c_str());
  }
  PKV_RETURN_IF_ERROR(g.get_string("tokenizer.ggml.pre", &t->pre, &found));
  PKV_RETURN_IF_ERROR(g.get_string_array("tokenizer.ggml.tokens", &t->tokens, &found));
  if (t->type != TokenizerType::None && !found)
    return make_error(StatusCode::kInvalidFile, "required metadata 'tokenizer.ggml.tokens' is missing");
  PKV_RETURN_IF_ERROR(g.get_f32_array("tokenizer.ggml.scores", &t->scores, &found));
  PKV_RETURN_IF_ERROR(g.get_i32_array("tokenizer.ggml.token_type", &t->token_types, &found));
  PKV_RETURN_IF_ERROR(g.get_string_array("tokenizer.ggml.merges", &t->merges, &found));
  PKV_RETURN_IF_ERROR(g.get_i32("tokenizer.ggml.bos_token_id", &t->bos_id, &found));
  PKV_RETURN_IF_ERROR(g.get_i32("tokenizer.ggml.eos_token_id", &t->eos_id, &found));
  PKV_RETURN_IF_ERROR(g.get_i32("tokenizer.ggml.eot_token_id", &t->eot_id, &found));
  PKV_RETURN_IF_ERROR(g.get_i32("tokenizer.ggml.padding_token_id", &t->pad_id, &found));
  PKV_RETURN_IF_ERROR(g.get_i32("tokenizer.ggml.unknown_token_id", &t->unk_id, &found));
  PKV_RETURN_IF_ERROR(g.get_bool("tokenizer.ggml.add_bos_token", &t->add_bos, &found));
  PKV_RETURN_IF_ERROR(g.get_bool("tokenizer.ggml.add_eos_token", &t->add_eos, &found));
  PKV_RETURN_IF_ERROR(g.get_bool("tokenizer.ggml.add_space_prefix", &t->add_space_prefix, &found));
  return Status::Ok();
}

std::string base_name(const std::string& path) {
  size_t p = path.find_last_of('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

}  // namespace

// Quantized tensors' f16 block scales must be finite: one NaN or infinite scale turns every
// product with its row into NaN, silently, at run time. (A few bytes per block: cheap.)
static Status check_block_scales(const std::vector<TensorInfo>& tensors, const std::vector<const void*>& data) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    const ScaleFields f = dtype_scale_fields(t.dtype);
    if (f.d < 0 || !data[i] || t.shape.empty()) continue;
    const DTypeInfo& info = dtype_info(t.dtype);
    const uint64_t blocks = t.elements() / info.block_elems;
    const uint64_t row_blocks = t.shape.back() / info.block_elems;
    const bool k = info.block_elems == 256;
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = static_cast<const uint8_t*>(data[i]) + b * info.block_bytes;
      for (int which = 0; which < 2; ++which) {
        const int off = which == 0 ? f.d : f.min;
        if (off < 0) continue;
        uint16_t h;
        std::memcpy(&h, blk + off, 2);
        if ((h & 0x7c00) != 0x7c00) continue;
        return make_error(StatusCode::kInvalidFile,
                          "tensor '%s' (%s) row %llu, %s %llu: scale %s is %s (f16 0x%04x); quantized weights need "
                          "finite scales",
                          t.name.c_str(), info.name, (unsigned long long)(b / row_blocks), k ? "super-block" : "block",
                          (unsigned long long)(b % row_blocks), which == 0 ? "d" : (k ? "dmin" : "m"),
                          (h & 0x03ff) ? "NaN" : "infinite", unsigned(h));
      }
    }
  }
  return Status::Ok();
}

// Float tensors (norms, biases, f16 embeddings, compressor tensors) must be finite: a NaN norm
// weight turns the whole residual stream into NaN at run time.
static Status check_float_values(const std::vector<TensorInfo>& tensors, const std::vector<const void*>& data) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    if (!data[i] || t.shape.empty()) continue;
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16) continue;
    const uint64_t n = t.elements();
    const uint8_t* p = static_cast<const uint8_t*>(data[i]);
    for (uint64_t j = 0; j < n; ++j) {
      bool bad = false, nan = false;
      if (t.dtype == DType::F32) {
        float v;
        std::memcpy(&v, p + 4 * j, 4);
        bad = !std::isfinite(v);
        nan = std::isnan(v);
      } else {
        uint16_t h;
        std::memcpy(&h, p + 2 * j, 2);
        const uint16_t exp = t.dtype == DType::F16 ? 0x7c00 : 0x7f80;
        const uint16_t man = t.dtype == DType::F16 ? 0x03ff : 0x007f;
        bad = (h & exp) == exp;
        nan = bad && (h & man) != 0;
      }
      if (!bad) continue;
      const uint64_t row = t.shape.back() ? j / t.shape.back() : 0;
      return make_error(StatusCode::kInvalidFile,
                        "tensor '%s' (%s) row %llu, element %llu is %s; weights must be finite", display_escape(t.name).c_str(),
                        dtype_name(t.dtype), (unsigned long long)row,
                        (unsigned long long)(t.shape.back() ? j % t.shape.back() : j), nan ? "NaN" : "infinite");
    }
  }
  return Status::Ok();
}

Status import_gguf(const GgufFile& g, const ImportOptions& opts, ModelSpec* spec, std::vector<const void*>* data,
                   std::vector<std::vector<float>>* owned) {
  ModelSpec s;
  bool has_rope_freqs = false;
  PKV_RETURN_IF_ERROR(import_config(g, &s.config, &has_rope_freqs));
  PKV_RETURN_IF_ERROR(import_tokenizer(g, &s.tokenizer));
  s.config.bos_id = s.tokenizer.bos_id;
  s.config.eos_id = s.tokenizer.eos_id;
  s.config.pad_id = s.tokenizer.pad_id;
  bool found = false;
  PKV_RETURN_IF_ERROR(g.get_string("tokenizer.chat_template", &s.chat_template, &found));

  std::vector<const void*> ptrs;
  for (const GgufTensor& gt : g.tensors()) {
    TensorInfo t;
    t.name = gt.name;
    if (!ggml_to_dtype(gt.ggml_type, &t.dtype)) {
      const GgmlTypeInfo* info = ggml_type_info(gt.ggml_type);
      return make_error(StatusCode::kUnsupported,
                        "tensor '%s' has GGML type %s (%u); PhaseKV supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                        "Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K "
                        "(re-quantize the model to one of them)",
                        gt.name.c_str(), info ? info->name : "unknown", gt.ggml_type);
    }
    t.shape.assign(gt.ne.rbegin(), gt.ne.rend());
    ptrs.push_back(gt.data);
    s.tensors.push_back(std::move(t));
  }

  s.layers.assign(s.config.n_layers, AttentionMemory{});
  std::vector<PlantedGate> planted;
  if (s.config.n_layers > 0) PKV_RETURN_IF_ERROR(apply_kv_specs(opts.kv_specs, &s.layers, &planted));

  auto add_tensor = [&](const std::string& name, DType dt, const std::vector<uint64_t>& shape,
                        const void* bytes, const char* origin) -> Status {
    if (s.find_tensor(name))
      return make_error(StatusCode::kInvalidArgument, "tensor '%s' (%s) is already in the model", display_escape(name).c_str(),
                        origin);
    TensorInfo t;
    t.name = name;
    t.dtype = dt;
    t.shape = shape;
    s.tensors.push_back(std::move(t));
    ptrs.push_back(bytes);
    return Status::Ok();
  };
  for (const ExtraTensor& e : opts.extra_tensors) {
    // Only tensors some layer's memory reads: a gate for a uniform layer is a mistake.
    bool used = false;
    std::string layer_desc = "no layer";
    unsigned layer = 0;
    if (std::sscanf(e.name.c_str(), "blk.%u.", &layer) == 1 && layer < s.layers.size()) {
      layer_desc = "layer " + std::to_string(layer) + " (" + s.layers[layer].describe() + ")";
      for (const CompressorTensor& c : compressor_tensors(s.config, s.layers[layer], layer)) used |= c.name == e.name;
    }
    if (!used)
      return make_error(StatusCode::kInvalidArgument,
                        "tensor '%s' from the gates file is not read by %s; set the layer's memory with --kv "
                        "(gate=scalar|vector, payload=map, entry_norm=1, sink=1)",
                        display_escape(e.name).c_str(), layer_desc.c_str());
    uint64_t need = 0;
    Status st = tensor_byte_size(e.dtype, e.shape, &need);
    if (!st.ok()) return st.with_context("tensor '" + e.name + "'");
    if (need != e.bytes.size())
      return make_error(StatusCode::kInvalidArgument, "tensor '%s': %zu bytes given, its dtype and shape need %llu",
                        display_escape(e.name).c_str(), e.bytes.size(), (unsigned long long)need);
    PKV_RETURN_IF_ERROR(add_tensor(e.name, e.dtype, e.shape, e.bytes.data(), "from the gates file"));
  }
  for (uint32_t l = 0; l < planted.size(); ++l) {
    if (!planted[l].on) continue;
    if (!owned) return make_error(StatusCode::kInternal, "import_gguf: planted gates need storage");
    const AttentionMemory& m = s.layers[l];
    const uint32_t nkv = s.config.n_kv_heads;
    owned->emplace_back();
    owned->emplace_back();  // moving the outer vector keeps each inner buffer where it is
    std::vector<float>& bk = (*owned)[owned->size() - 2];
    std::vector<float>& bv = (*owned)[owned->size() - 1];
    planted_gate_biases(planted[l], m.window, nkv, &bk, &bv);
    const std::string p = "blk." + std::to_string(l) + ".";
    PKV_RETURN_IF_ERROR(add_tensor(p + "cmp_k_gate.bias", DType::F32, {m.window, nkv}, bk.data(), "planted gate"));
    PKV_RETURN_IF_ERROR(add_tensor(p + "cmp_v_gate.bias", DType::F32, {m.window, nkv}, bv.data(), "planted gate"));
  }

  s.provenance.source_file = base_name(g.path());
  s.provenance.source_format = "gguf v" + std::to_string(g.version());
  PKV_RETURN_IF_ERROR(g.get_string("general.name", &s.provenance.source_name, &found));
  s.provenance.converter = kConverterVersion;
  (void)has_rope_freqs;
  PKV_RETURN_IF_ERROR(check_block_scales(s.tensors, ptrs));
  PKV_RETURN_IF_ERROR(check_float_values(s.tensors, ptrs));
  *spec = std::move(s);
  *data = std::move(ptrs);
  return Status::Ok();
}

Status convert_gguf_to_pkv(const std::string& in_path, const std::string& out_path, const ImportOptions& opts,
                           ModelSpec* spec_out) {
  std::unique_ptr<GgufFile> g;
  PKV_RETURN_IF_ERROR(GgufFile::open(in_path, &g));
  ModelSpec spec;
  std::vector<const void*> data;
  std::vector<std::vector<float>> owned;
  Status s = import_gguf(*g, opts, &spec, &data, &owned);
  if (!s.ok()) return s.with_context(in_path);
  uint64_t blob = 0;
  PKV_RETURN_IF_ERROR(layout_tensors(&spec.tensors, &blob));
  s = validate_spec(spec, blob);
  if (!s.ok()) return s.with_context(in_path + " (imported)");
  // Compressor tensors the GGUF carries itself get the value check --gates tensors get: a NaN
  // or infinite gate would make a file that every load refuses.
  for (uint32_t l = 0; l < spec.layers.size(); ++l)
    for (const CompressorTensor& e : compressor_tensors(spec.config, spec.layers[l], l))
      for (size_t i = 0; i < spec.tensors.size(); ++i) {
        if (spec.tensors[i].name != e.name || !data[i]) continue;
        std::vector<float> v(size_t(spec.tensors[i].elements()));
        dequantize_row(spec.tensors[i].dtype, data[i], v.data(), int64_t(v.size()));
        for (size_t j = 0; j < v.size(); ++j)
          if (!std::isfinite(v[j]))
            return make_error(StatusCode::kInvalidFile, "%s: tensor '%s' element %zu is %s", in_path.c_str(),
                              display_escape(e.name).c_str(), j, std::isnan(v[j]) ? "NaN" : "infinite");
      }
  WriteOptions wo;
  wo.replace = opts.replace;
  PKV_RETURN_IF_ERROR(write_model_file(out_path, spec, data, wo));
  if (spec_out) *spec_out = std::move(spec);
  return Status::Ok();
}

}  // namespace phasekv
