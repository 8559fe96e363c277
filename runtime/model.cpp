#include "model.h"

#include <cmath>

namespace phasekv {

Status Model::load(const std::string& path, std::unique_ptr<Model>* out) {
  std::unique_ptr<Model> m(new Model());
  PKV_RETURN_IF_ERROR(ModelFile::open(path, &m->file_));
  Status s = m->build();
  if (!s.ok()) return s.with_context(path);
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

Status Model::norm(const std::string& name, const float** out) {
  const TensorInfo* t = file_->find_tensor(name);
  if (!t) return make_error(StatusCode::kInvalidFile, "tensor '%s' is missing", name.c_str());
  if (t->dtype == DType::F32) {
    *out = reinterpret_cast<const float*>(file_->tensor_data(*t));
    return Status::Ok();
  }
  if (t->dtype != DType::F16 && t->dtype != DType::BF16)
    return make_error(StatusCode::kUnsupported, "tensor '%s': norm weights in %s are not supported", name.c_str(),
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
  converted_norms_.reserve(size_t(c.n_layers) * 2 + 1);  // pointers into it must stay valid
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
    PKV_RETURN_IF_ERROR(weight(p + "ffn_gate.weight", &L.w_gate));
    PKV_RETURN_IF_ERROR(weight(p + "ffn_up.weight", &L.w_up));
    PKV_RETURN_IF_ERROR(weight(p + "ffn_down.weight", &L.w_down));
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
