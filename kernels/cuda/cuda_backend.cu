#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "attention.cuh"
#include "compress.cuh"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "elementwise.cuh"
#include "embed.cuh"
#include "matmul.cuh"
#include "norm.cuh"
#include "rope.cuh"
#include "score.cuh"

namespace phasekv {
namespace cuda {

bool CudaBackend::available(std::string* why) { return device_count(why) > 0; }

Status CudaBackend::create(const CudaBackendParams& p, std::unique_ptr<CudaBackend>* out) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) return make_error(StatusCode::kUnsupported, "no CUDA device: %s", why.c_str());
  if (p.device < 0 || p.device >= n)
    return make_error(StatusCode::kInvalidArgument, "device = %d: this machine has %d CUDA device(s)", p.device, n);
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->device_ = p.device;
  PKV_CUDA_CHECK(cudaSetDevice(p.device));
  cudaDeviceProp prop;
  PKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, p.device));
  int integrated = 0;
  PKV_CUDA_CHECK(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, p.device));
  b->integrated_ = integrated != 0;
  b->weights_ = p.weights == WeightsMode::Auto ? (b->integrated_ ? WeightsMode::MappedHost : WeightsMode::DeviceCopy)
                                               : p.weights;
  if (b->weights_ == WeightsMode::MappedHost) {
    int can_map = 0;
    PKV_CUDA_CHECK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, p.device));
    if (!can_map)
      return make_error(StatusCode::kUnsupported, "cuda_weights = mapped: device %d cannot map host memory", p.device);
  }
  char d[256];
  std::snprintf(d, sizeof d, "cuda sm_%d%d %s%s", prop.major, prop.minor, prop.name, b->integrated_ ? " (integrated)" : "");
  b->description_ = d;
  PKV_CUDA_CHECK(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking));
  *out = std::move(b);
  return Status::Ok();
}

CudaBackend::~CudaBackend() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

bool CudaBackend::supports(BackendOp op, DType t) const {
  switch (op) {
    case BackendOp::Embed:
    case BackendOp::Matmul:  // every dtype: common.cuh's dequant_element decodes all thirteen
      return uint8_t(t) < kDTypeCount;
    case BackendOp::RmsNorm:
    case BackendOp::Rope:
    case BackendOp::Attention:
    case BackendOp::Compress:
    case BackendOp::CompressReset:
    case BackendOp::SiluMul:
    case BackendOp::Add:
    case BackendOp::Copy:
    case BackendOp::RingWrite:
    case BackendOp::GoldScore: return t == DType::F32;
  }
  return false;
}

// The kernels keep everything in registers and shared memory: no workspace.
size_t CudaBackend::workspace_bytes(const WorkspaceQuery&) const { return 0; }

Status CudaBackend::bind_workspace(void*, size_t, const WorkspaceQuery& q) {
  if (q.head_dim > kAttentionMaxHeadDim)
    return make_error(StatusCode::kUnsupported, "cuda backend: head_dim = %d exceeds %d", q.head_dim,
                      kAttentionMaxHeadDim);
  return Status::Ok();
}

MemorySpace CudaBackend::weights_space() const {
  return weights_ == WeightsMode::DeviceCopy ? MemorySpace::Device : MemorySpace::PinnedHost;
}

std::string CudaBackend::weights_key() const {
  return "cuda:" + std::to_string(device_) + (weights_ == WeightsMode::DeviceCopy ? ":device copy" : ":mapped host");
}

Status CudaBackend::map_weights(const HostRegion* regions, int n, std::shared_ptr<WeightMapping>* out) {
  PKV_CUDA_CHECK(cudaSetDevice(device_));
  return map_weights_cuda(weights_, regions, n, out);
}

Status CudaBackend::allocate(MemorySpace space, size_t bytes, void** out) {
  PKV_CUDA_CHECK(cudaSetDevice(device_));
  return allocate_space(space, bytes, out);
}

void CudaBackend::release(MemorySpace space, void* p) { release_space(space, p); }

Status CudaBackend::zero(MemorySpace space, void* p, size_t bytes) {
  if (space == MemorySpace::Device) {
    PKV_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    PKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
  } else {
    std::memset(p, 0, bytes);
  }
  return Status::Ok();
}

void CudaBackend::fail(const Status& s) {
  if (error_.ok()) (void)(error_ = s);
}

void CudaBackend::check_launch(const char* op) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    fail(make_error(StatusCode::kInternal, "CUDA %s failed: %s (%s)", op, cudaGetErrorString(e), cudaGetErrorName(e)));
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_);
  if (e != cudaSuccess) fail(cuda_status(int(e), "cudaMemcpyAsync (device to device)", __FILE__, __LINE__));
}

// The host source may be reused as soon as upload returns (the context refills its pinned
// staging for the next chunk): the copy is waited for here.
void CudaBackend::upload(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  cudaError_t e = cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) fail(cuda_status(int(e), "cudaMemcpyAsync (host to device)", __FILE__, __LINE__));
}

void CudaBackend::download(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0 || host_dst == src) return;
  const cudaError_t e = cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_);
  if (e != cudaSuccess) fail(cuda_status(int(e), "cudaMemcpyAsync (device to host)", __FILE__, __LINE__));
}

Status CudaBackend::synchronize() {
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess)
    fail(make_error(StatusCode::kInternal, "CUDA execution failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e)));
  Status s = error_;
  (void)(error_ = Status());
  return s;
}

void CudaBackend::embed(const WeightView& table, const int32_t* tokens, int n, float* out) {
  if (!launch_embed(table, tokens, n, out, stream_))
    return fail(make_error(StatusCode::kUnsupported, "cuda embed: dtype %u has no kernel", unsigned(table.dtype)));
  check_launch("embed");
}

void CudaBackend::rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out) {
  launch_rmsnorm(x, w, eps, n, dim, out, stream_);
  check_launch("rmsnorm");
}

void CudaBackend::matmul(const WeightView* w, float* const* y, int n_mats, const float* x, int n) {
  for (int m = 0; m < n_mats; ++m)
    if (!launch_matmul(w[m], x, n, y[m], stream_))
      return fail(make_error(StatusCode::kUnsupported, "cuda matmul: dtype %u has no kernel", unsigned(w[m].dtype)));
  check_launch("matmul");
}

void CudaBackend::rope(float* x, int n, int n_heads, int head_dim, int first_pos, const float* inv_freq, int rope_dim,
                       bool interleaved, float pos_scale) {
  RopeParams p;
  p.x = x;
  p.n = n;
  p.n_heads = n_heads;
  p.head_dim = head_dim;
  p.first_pos = first_pos;
  p.inv_freq = inv_freq;
  p.rope_dim = rope_dim;
  p.interleaved = interleaved;
  p.pos_scale = pos_scale;
  launch_rope(p, stream_);
  check_launch("rope");
}

void CudaBackend::attention(const AttentionArgs& a) {
  if (a.head_dim > kAttentionMaxHeadDim)
    return fail(make_error(StatusCode::kUnsupported, "cuda attention: head_dim %d > %d", a.head_dim, kAttentionMaxHeadDim));
  launch_attention(a, stream_);
  check_launch("attention");
}

void CudaBackend::compress(const CompressArgs& a) {
  if (a.head_dim > kCompressMaxHeadDim)
    return fail(make_error(StatusCode::kUnsupported, "cuda compress: head_dim %d > %d", a.head_dim, kCompressMaxHeadDim));
  launch_compress(a, stream_);
  check_launch("compress");
}

void CudaBackend::compress_reset(float* acc, int n_windows, int n_kv_heads, int d_g, int head_dim) {
  launch_compress_reset(acc, n_windows, n_kv_heads, d_g, head_dim, stream_);
  check_launch("compress_reset");
}

void CudaBackend::silu_mul(const float* g, const float* u, float* out, size_t n) {
  launch_silu_mul(g, u, out, n, stream_);
  check_launch("silu_mul");
}

void CudaBackend::add(float* x, const float* y, size_t n) {
  launch_add(x, y, n, stream_);
  check_launch("add");
}

void CudaBackend::ring_write(const RingWriteArgs& a) {
  launch_ring_write(a, stream_);
  check_launch("ring_write");
}

void CudaBackend::gold_score(const float* logits, int n, int32_t gold, ScoreResult* out) {
  launch_gold_score(logits, n, gold, out, stream_);
  check_launch("gold_score");
}

}  // namespace cuda
}  // namespace phasekv
