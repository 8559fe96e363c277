// A loaded model: the mapped, verified file plus everything derived from it once (weight
// views, f32 norm weights, RoPE frequencies, the tokenizer). Immutable after load, so any
// number of contexts may share it from any threads.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "model_file.h"
#include "tokenizer.h"

namespace phasekv {

class Model {
 public:
  struct Layer {
    const float* attn_norm;  // [d_model]
    WeightView wq, wk, wv, wo;
    const float* ffn_norm;   // [d_model]
    WeightView w_gate, w_up, w_down;
    // Compressor tensors (model_spec.h compressor_tensors); null data = absent.
    struct Branch {
      const float* gate_bias = nullptr;  // [W, G]
      WeightView gate_map;               // [G, d] or, per offset, [W*G, d]
      WeightView payload_map;            // [kvd, d] or, per offset, [W*kvd, d]
    };
    Branch cmp[2];                       // 0: K, 1: V
    const float* k_norm = nullptr;       // [head_dim] entry RMSNorm
    const float* sink = nullptr;         // [n_heads]
    // Architecture switches (config.attn_bias, config.qk_norm); null = absent.
    const float* bq = nullptr;           // [n_heads * head_dim] (qwen2)
    const float* bk = nullptr;           // [n_kv_heads * head_dim]
    const float* bv = nullptr;           // [n_kv_heads * head_dim]
    const float* q_norm = nullptr;       // [head_dim] per-head RMSNorm of q before RoPE (qwen3)
    const float* kh_norm = nullptr;      // [head_dim] the same for k
  };

  struct LoadOptions {
    // Load the full-attention twin: every layer's memory replaced by full attention (the
    // self-test's control). Refused when a compressed layer has its own payload maps (no
    // K/V projections to attend with).
    bool full_attention = false;
    // true: map the file and use the weights in place (the default; the file must not change
    // while the model is loaded: replace it by writing elsewhere and renaming). false: read the
    // file into memory the model owns, so replacing or truncating the file cannot affect it
    // (ModelFile::OpenOptions::map). Refused with kOutOfMemory, before reading, when the file
    // is larger than the memory this process can still have (host_memory.h).
    bool mmap = true;
    // Check the tensor data against the content hash written at conversion: kInvalidFile on a
    // mismatch, kUnsupported for a file without one. Costs one pass over the weights.
    bool verify = false;
  };
  static Status load(const std::string& path, std::unique_ptr<Model>* out);
  static Status load(const std::string& path, const LoadOptions& options, std::unique_ptr<Model>* out);

  const ModelFile& file() const { return *file_; }
  // The file's metadata; with LoadOptions::full_attention the layers say full.
  const ModelSpec& spec() const { return spec_; }
  const ModelConfig& config() const { return spec_.config; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const Layer& layer(int i) const { return layers_[size_t(i)]; }
  const WeightView& token_embd() const { return token_embd_; }
  const WeightView& output() const { return output_; }
  const float* output_norm() const { return output_norm_; }
  const float* rope_inv_freq() const { return rope_inv_freq_.data(); }  // [rope.dim / 2]
  float rope_pos_scale() const { return rope_pos_scale_; }
  uint64_t weight_bytes() const { return file_->header().blob_size; }

  // The weights as `backend`'s ops read them (backend.h WeightMapping): made on the first call
  // for a backend's weights_key() — for CUDA one device (or mapped host) copy of the tensor blob,
  // the converted norms and the RoPE table — and shared by every later context. Thread-safe.
  Status weights_for(Backend& backend, std::shared_ptr<WeightMapping>* out) const;

 private:
  Model() = default;
  Status build();
  Status weight(const std::string& name, WeightView* out) const;
  Status compressor(uint32_t layer);
  Status norm(const std::string& name, const float** out);

  std::unique_ptr<ModelFile> file_;
  ModelSpec spec_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<Layer> layers_;
  WeightView token_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<std::vector<float>> converted_norms_;  // norms stored as F16/BF16, converted once
  std::vector<float> rope_inv_freq_;
  float rope_pos_scale_ = 1.0f;
  mutable std::mutex mappings_mu_;
  mutable std::vector<std::pair<std::string, std::shared_ptr<WeightMapping>>> mappings_;
};

}  // namespace phasekv
