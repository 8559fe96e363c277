#include "model.h"

#include <sys/stat.h>

#include <cmath>
#include <vector>

#include "file_io.h"
#include "host_memory.h"

namespace phasekv {

Status Model::load(const std::string& path, std::unique_ptr<Model>* out) { return load(path, LoadOptions(), out); }

Status Model::load(const std::string& path, const LoadOptions& options, std::unique_ptr<Model>* out) {
  std::unique_ptr<Model> m(new Model());
  ModelFile::OpenOptions fo;
  fo.map = options.mmap;
  fo.verify = options.verify;
  if (!options.mmap) {
    // The copy takes the file's size in RAM: refused before reading when it cannot fit.
    struct stat st;
    const HostMemory hm = host_memory_available();
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && hm.known && uint64_t(st.st_size) > hm.available)
      return make_error(StatusCode::kOutOfMemory,
                        "%s: reading the model into memory (no mmap) needs %llu bytes, more than this process can "
                        "still have (%llu bytes: %s); load it mapped instead",
                        display_escape(path).c_str(), (unsigned long long)st.st_size,
                        (unsigned long long)hm.available, hm.source.c_str());
  }
  PKV_RETURN_IF_ERROR(ModelFile::open(path, fo, &m->file_));
  m->spec_ = m->file_->spec();
  if (options.full_attention) {
    for (uint32_t l = 0; l < m->spec_.layers.size(); ++l) {
      const AttentionMemory& a = m->spec_.layers[l];
      if (a.kind == MemoryKind::Compressed && a.payload != PayloadSource::LayerProjection)
        return make_error(StatusCode::kUnsupported,
                          "%s: layer %u (%s) pools its own payload maps; the file has no full-attention twin",
                          display_escape(path).c_str(), l, a.describe().c_str());
      m->spec_.layers[l] = AttentionMemory();
    }
  }
  Status s = m->build();
  if (!s.ok()) return s.with_context(display_escape(path));
  *out = std::move(m);
  return Status::Ok();
}

Status Model::weights_for(Backend& backend, std::shared_ptr<WeightMapping>* out) const {
  const std::string key = backend.weights_key();
  std::lock_guard<std::mutex> lock(mappings_mu_);
  for (const auto& m : mappings_)
    if (m.first == key) {
      *out = m.second;
      return Status::Ok();
    }
  std::vector<HostRegion> regions;
  regions.push_back({file_->blob(), size_t(file_->header().blob_size), file_->mapped()});
  for (const std::vector<float>& n : converted_norms_) regions.push_back({n.data(), n.size() * sizeof(float)});
  if (!rope_inv_freq_.empty()) regions.push_back({rope_inv_freq_.data(), rope_inv_freq_.size() * sizeof(float)});
  std::shared_ptr<WeightMapping> m;
  PKV_RETURN_IF_ERROR(backend.map_weights(regions.data(), int(regions.size()), &m));
  mappings_.emplace_back(key, m);
  *out = std::move(m);
  return Status::Ok();
}

Status Model::weight(const std::string& name, WeightView* out) const {
  const TensorInfo* t = file_->find_tensor(name);
  if (!t || t->shape.size() != 2)
    return make_error(StatusCode::kInvalidFile, "tensor '%s' is missing or not 2-D", name.c_str());
  out->dtype = t->dtype;
  out->data = file_->tensor_data(*t);
  out->rows = int(t->shape[0]);
  out->cols = int(t->shape[1]);
  out->row_bytes = size_t(t->size / t->shape[0]);
  return Status::Ok();
}

namespace {

// A 2- or 3-D tensor as a matrix of its innermost rows.
WeightView matrix_view(const ModelFile& f, const TensorInfo& t) {
  WeightView w;
  w.dtype = t.dtype;
  w.data = f.tensor_data(t);
  uint64_t rows = 1;
  for (size_t i = 0; i + 1 < t.shape.size(); ++i) rows *= t.shape[i];
  w.rows = int(rows);
  w.cols = int(t.shape.back());
  w.row_bytes = size_t(t.size / rows);
  return w;
}

Status check_finite(const ModelFile& f, const TensorInfo& t) {
  const WeightView w = matrix_view(f, t);
  std::vector<float> row(size_t(w.cols));
  for (int r = 0; r < w.rows; ++r) {
    dequantize_row(t.dtype, static_cast<const uint8_t*>(w.data) + size_t(r) * w.row_bytes, row.data(), w.cols);
    for (int c = 0; c < w.cols; ++c)
      if (!std::isfinite(row[size_t(c)]))
        return make_error(StatusCode::kInvalidFile, "tensor '%s' element %llu is %s", t.name.c_str(),
                          (unsigned long long)(uint64_t(r) * uint64_t(w.cols) + uint64_t(c)),
                          std::isnan(row[size_t(c)]) ? "NaN" : "infinite");
  }
  return Status::Ok();
}

}  // namespace

Status Model::compressor(uint32_t l) {
  const AttentionMemory& m = spec().layers[l];
  Layer& L = layers_[l];
  const std::string p = "blk." + std::to_string(l) + ".";
  for (const CompressorTensor& e : compressor_tensors(config(), m, l)) {
    const TensorInfo* t = file_->find_tensor(e.name);
    if (!t) continue;  // optional and absent (validated with the file)
    PKV_RETURN_IF_ERROR(check_finite(*file_, *t));
    const float* f32 = reinterpret_cast<const float*>(file_->tensor_data(*t));
    const std::string n = e.name.substr(p.size());
    if (n == "attn_sink") L.sink = f32;
    else if (n == "cmp_k_norm.weight") L.k_norm = f32;
    else if (n == "cmp_k_gate.bias") L.cmp[0].gate_bias = f32;
    else if (n == "cmp_v_gate.bias") L.cmp[1].gate_bias = f32;
    else if (n == "cmp_k_gate.weight") L.cmp[0].gate_map = matrix_view(*file_, *t);
    else if (n == "cmp_v_gate.weight") L.cmp[1].gate_map = matrix_view(*file_, *t);
    else if (n == "cmp_k.weight") L.cmp[0].payload_map = matrix_view(*file_, *t);
    else if (n == "cmp_v.weight") L.cmp[1].payload_map = matrix_view(*file_, *t);
  }
  return Status::Ok();
}

Status Model::norm(const std::string& name, const float** out) {
  const TensorInfo* t = file_->find_tensor(name);
  if (!t) return make_error(StatusCode::kInvalidFile, "tensor '%s' is missing", name.c_str());
  if (t->dtype == DType::F32) {
    *out = reinterpret_cast<const float*>(file_->tensor_data(*t));
    return Status::Ok();
  }
  if (t->dtype != DType::F16 && t->dtype != DType::BF16)
    return make_error(StatusCode::kUnsupported, "tensor '%s': norm weights and biases in %s are not supported", name.c_str(),
                      dtype_name(t->dtype));
  converted_norms_.emplace_back(t->elements());
  dequantize_row(t->dtype, file_->tensor_data(*t), converted_norms_.back().data(), int64_t(t->elements()));
  *out = converted_norms_.back().data();
  return Status::Ok();
}

Status Model::build() {
  const ModelConfig& c = config();
  PKV_RETURN_IF_ERROR(Tokenizer::create(spec().tokenizer, &tokenizer_));
  if (tokenizer_->n_tokens() > int32_t(c.vocab_size))
    return make_error(StatusCode::kInvalidFile, "tokenizer has %d tokens for vocab_size %u", tokenizer_->n_tokens(),
                      c.vocab_size);
  converted_norms_.reserve(size_t(c.n_layers) * 7 + 1);  // pointers into it must stay valid
  PKV_RETURN_IF_ERROR(weight("token_embd.weight", &token_embd_));
  if (c.tied_embeddings) {
    output_ = token_embd_;
  } else {
    PKV_RETURN_IF_ERROR(weight("output.weight", &output_));
  }
  PKV_RETURN_IF_ERROR(norm("output_norm.weight", &output_norm_));
  layers_.resize(c.n_layers);
  for (uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    Layer& L = layers_[i];
    PKV_RETURN_IF_ERROR(norm(p + "attn_norm.weight", &L.attn_norm));
    PKV_RETURN_IF_ERROR(norm(p + "ffn_norm.weight", &L.ffn_norm));
    PKV_RETURN_IF_ERROR(weight(p + "attn_q.weight", &L.wq));
    PKV_RETURN_IF_ERROR(weight(p + "attn_k.weight", &L.wk));
    PKV_RETURN_IF_ERROR(weight(p + "attn_v.weight", &L.wv));
    PKV_RETURN_IF_ERROR(weight(p + "attn_output.weight", &L.wo));
    if (c.attn_bias) {
      PKV_RETURN_IF_ERROR(norm(p + "attn_q.bias", &L.bq));
      PKV_RETURN_IF_ERROR(norm(p + "attn_k.bias", &L.bk));
      PKV_RETURN_IF_ERROR(norm(p + "attn_v.bias", &L.bv));
    }
    if (c.qk_norm) {
      PKV_RETURN_IF_ERROR(norm(p + "attn_q_norm.weight", &L.q_norm));
      PKV_RETURN_IF_ERROR(norm(p + "attn_k_norm.weight", &L.kh_norm));
    }
    PKV_RETURN_IF_ERROR(weight(p + "ffn_gate.weight", &L.w_gate));
    PKV_RETURN_IF_ERROR(weight(p + "ffn_up.weight", &L.w_up));
    PKV_RETURN_IF_ERROR(weight(p + "ffn_down.weight", &L.w_down));
    PKV_RETURN_IF_ERROR(compressor(i));
  }
  // RoPE: inv_freq[i] = theta^(-2i/dim), divided by the Llama 3 factors when the file has them.
  const uint32_t half = c.rope.dim / 2;
  if (half > 512) return make_error(StatusCode::kUnsupported, "config.rope.dim = %u exceeds 1024", c.rope.dim);
  rope_inv_freq_.resize(half);
  for (uint32_t i = 0; i < half; ++i)
    rope_inv_freq_[i] = float(std::pow(double(c.rope.theta), -2.0 * double(i) / double(c.rope.dim)));
  switch (c.rope.scaling) {
    case RopeScaling::None: break;
    case RopeScaling::Linear: rope_pos_scale_ = 1.0f / c.rope.factor; break;
    case RopeScaling::Llama3: {
      const TensorInfo* f = file_->find_tensor("rope_freqs.weight");
      if (!f || f->dtype != DType::F32 || f->elements() != half)
        return make_error(StatusCode::kUnsupported,
                          "config.rope.scaling = llama3 needs an F32 'rope_freqs.weight' of %u values", half);
      const float* ff = reinterpret_cast<const float*>(file_->tensor_data(*f));
      for (uint32_t i = 0; i < half; ++i) rope_inv_freq_[i] /= ff[i];
      break;
    }
    case RopeScaling::YaRN:
      return make_error(StatusCode::kUnsupported, "config.rope.scaling = yarn is not implemented yet");
  }
  return Status::Ok();
}

}  // namespace phasekv
