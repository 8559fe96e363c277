// RoPE on the GPU: both pair conventions (interleaved (2i, 2i+1), NeoX (i, i + rope_dim/2)) and
// the CPU's position scaling (linear: pos * pos_scale; Llama 3: divided inv_freq tables). The
// rotation itself rounds as cpu::rope_apply (common.cuh rope_rotate); cosf/sinf of the device
// math library differ from the host's by at most a couple of ulps.
#pragma once

typedef struct CUstream_st* cudaStream_t;

namespace phasekv {
namespace cuda {

struct RopeParams {
  float* x = nullptr;              // [n, n_heads * head_dim] device, in place
  int n = 0, n_heads = 0, head_dim = 0, first_pos = 0;
  const float* inv_freq = nullptr; // [rope_dim / 2] device
  int rope_dim = 0;
  bool interleaved = true;
  float pos_scale = 1.0f;
};
void launch_rope(const RopeParams& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace phasekv
