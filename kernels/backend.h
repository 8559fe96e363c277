// The backend seam: the ops a forward pass needs, over buffers the context planned.
//
// Contract for every backend (CPU now, CUDA next):
//   * Plan, then bind: workspace_bytes() reports the scratch a backend needs for a context's
//     shapes; the context allocates it once (with everything else) and bind_workspace()
//     hands it over. No op allocates.
//   * Pointers passed to ops address the backend's memory (host for CPU, device for CUDA);
//     weights point into the mapped model file (or a device copy the backend made at bind).
//   * supports() answers per op and weight dtype; a context fails at creation, never inside
//     an op, when something is unsupported.
//   * Within one backend, results do not depend on the chunking of a prompt or on the
//     thread count (see kernels/cpu/cpu_kernels.h for how the CPU backend keeps that).
//   * Memory: the backend says where a context's state lives (state_space()) and takes each
//     memory space's arena in ONE allocate() at context creation; ops read and write only those
//     arenas, the caller's host buffers named as such (upload/download), and the weights it
//     mapped (map_weights). Ops are issued in order and may run asynchronously (CUDA: one
//     stream); synchronize() waits for all of them and returns the first failure since the
//     previous call (a CUDA launch or execution error with its message), never aborting.
// Shapes are written [rows, cols], row-major; "tokens" is the chunk being evaluated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtype.h"
#include "status.h"

namespace phasekv {

enum class BackendOp {
  Embed, RmsNorm, Matmul, Rope, Attention, Compress, CompressReset, SiluMul, Add,
  Copy,       // copy / upload / download of raw bytes
  RingWrite,  // the chunk's last rows into a windowed layer's ring
  GoldScore,  // NLL, argmax and hit of one gold token over a logit row
};
const char* backend_op_name(BackendOp op);

// Where a buffer lives. Host: ordinary memory; PinnedHost: page-locked host memory that a GPU
// can copy from asynchronously (the CPU backend treats it as Host); Device: GPU memory.
enum class MemorySpace : uint8_t { Host = 0, PinnedHost = 1, Device = 2 };
constexpr int kMemorySpaces = 3;
const char* memory_space_name(MemorySpace s);

// The gold-score op's result (one per scored logit row), in backend memory.
struct ScoreResult {
  double nll = 0;      // log(sum_i exp(l_i - max)) - (l_gold - max), sums in double, index order on the CPU
  int32_t argmax = 0;  // the first index holding the maximum logit
  int32_t hit = 0;     // argmax == gold
};

// Host memory the weights live in (the mapped tensor blob, norms converted at load, RoPE tables).
struct HostRegion {
  const void* data = nullptr;
  size_t bytes = 0;
  // Pages of a read-only file mapping (the model file, mapped): a backend that has copied some of
  // them may drop them from the process (madvise); a later read faults them back from the file.
  bool file_mapped = false;
};

// The weights as a backend's ops read them: identity on the CPU; on a discrete GPU one device
// copy; on an integrated GPU one copy in pinned, mapped host memory. Made once per model and
// backend kind, shared by every context of that model (Model keeps it).
struct WeightView;
class WeightMapping {
 public:
  virtual ~WeightMapping() = default;
  // The address ops use for `host`, a pointer into one of the mapped regions (nullptr -> nullptr;
  // a pointer outside every region -> nullptr too, which the caller treats as an internal error).
  const void* translate(const void* host) const;
  // The view ops use for the model's matrix `host` (its data a pointer into a mapped region):
  // translate()'s address in the file's layout, or, for a matrix that only matmul reads
  // (matmul_only) where the backend keeps a layout of its own, that copy (the CPU backend's R4
  // copies in the q8 modes, made on the first call for the matrix -- a context's creation, never
  // a decode -- and shared by every context after). out->data is nullptr where translate()'s is;
  // an error only when a copy cannot be allocated.
  virtual Status view(const WeightView& host, bool matmul_only, WeightView* out) const;
  const char* mode() const { return mode_; }              // "host" (in place), "device copy", "mapped host"
  MemorySpace space() const { return space_; }            // where the copy lives (Host: no copy)
  uint64_t bytes() const { return bytes_; }               // bytes of the copy (0 for in place)

 protected:
  struct Region {
    const uint8_t* host;
    size_t bytes;
    const uint8_t* mapped;
  };
  std::vector<Region> regions_;
  const char* mode_ = "host";
  MemorySpace space_ = MemorySpace::Host;
  mutable uint64_t bytes_ = 0;  // mutable: copies made lazily by view() add to it
};

// A windowed layer keeps its chunk's last min(n_tokens, ring_rows) K/V rows: token t of the
// chunk goes to ring row (first_pos + t) % ring_rows.
struct RingWriteArgs {
  float* ring_k = nullptr;         // [ring_rows, kvd]
  float* ring_v = nullptr;
  const float* k_rows = nullptr;   // [n_tokens, kvd]
  const float* v_rows = nullptr;
  int n_tokens = 0;
  int first_pos = 0;
  int ring_rows = 0;
  int kvd = 0;
};

// A weight matrix [rows, cols] in the model file.
struct WeightView {
  DType dtype = DType::F32;
  const void* data = nullptr;
  size_t row_bytes = 0;
  int rows = 0;
  int cols = 0;
  // 0: the file's rows. Else a backend's own layout (WeightMapping::view; the CPU backend's R4,
  // cpu_kernels.h WeightLayout), `aux` its second part (R4: the scales).
  uint8_t layout = 0;
  const void* aux = nullptr;
};

// What a backend sizes its scratch from.
struct WorkspaceQuery {
  int max_tokens = 1;   // largest chunk
  int max_k = 1;        // largest inner dimension of a matmul
  int n_ctx = 1;        // most keys one query can see
  int attention_group = 1;  // query heads per KV head (scored together)
  int head_dim = 1;
  int n_threads = 1;
};

// Attention of a chunk of queries over one layer's memory (DESIGN.md section 3). The query at
// absolute position t = first_pos + i sees, in ONE softmax (in this order):
//   1. compressed entries 0 .. floor((t+1)/stride) - 1           (stride > 0)
//   2. exact tokens: local < 0: every token 0..t, row p of k_cache (full memory);
//      local >= 0: tokens max(0, t-local+1)..t, where a token p < first_pos is row p % ring_rows
//      of k_cache (a ring of the last tokens before the chunk) and p >= first_pos is row
//      p - first_pos of k_chunk (the chunk's own rows)
//   plus, when sink is set, exp(sink[h]) in the denominator. A query that sees nothing gets 0.
struct AttentionArgs {
  const float* q = nullptr;        // [tokens, n_heads * head_dim], rotated
  const float* k_cache = nullptr;  // full: [n_ctx, kvd]; windowed: ring [ring_rows, kvd]
  const float* v_cache = nullptr;
  float* out = nullptr;            // [tokens, n_heads * head_dim]
  int n_tokens = 0;
  int first_pos = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;              // 1/sqrt(head_dim)
  int local = -1;                  // -1: full memory; >= 0: the last `local` exact tokens
  int ring_rows = 0;
  const float* k_chunk = nullptr;  // [tokens, kvd] (local >= 0)
  const float* v_chunk = nullptr;
  int stride = 0;                  // 0: no entries
  const float* k_entries = nullptr;  // [entries, kvd]
  const float* v_entries = nullptr;
  const float* sink = nullptr;     // [n_heads] extra logit (not scaled)
};

// The streaming compressor of one compressed layer (DESIGN.md section 3), for a chunk of
// tokens at positions first_pos..: every token is added to the open windows that contain it
// (online softmax: running max, denominator, weighted sum per KV head and gate channel), and
// entry j is written when token (j+1)S-1 has been added. Branch 0 pools keys, branch 1 values.
struct CompressArgs {
  int n_tokens = 0;
  int first_pos = 0;
  int window = 1;       // W
  int stride = 1;       // S
  int n_kv_heads = 0;
  int head_dim = 0;
  int d_g = 1;          // gate channels per KV head: 1 (uniform, scalar) or head_dim (vector)
  struct Branch {
    // Gate logit of token t in slot i, KV head h, channel c (G = n_kv_heads * d_g):
    //   (gate ? gate[t * gate_stride + (gate_per_offset ? i * G : 0) + h * d_g + c] : 0)
    //   + (bias ? bias[i * G + h * d_g + c] : 0)
    const float* gate = nullptr;
    int gate_stride = 0;
    bool gate_per_offset = false;
    const float* bias = nullptr;
    // Payload of token t in slot i: payload[t * payload_stride + (payload_per_offset ? i * kvd : 0) + h * head_dim ..]
    const float* payload = nullptr;
    int payload_stride = 0;
    bool payload_per_offset = false;
    float* acc = nullptr;      // [ceil(W/S), n_kv_heads, 2 * d_g + head_dim]: max, den, sum
    float* entries = nullptr;  // [max entries, kvd]
  } b[2];
  // Keys pooled un-rotated (RotateEntry): optional RMSNorm per head, then RoPE at j * S.
  bool rotate_entry = false;
  const float* entry_norm = nullptr;  // [head_dim] or null
  float norm_eps = 1e-5f;
  const float* inv_freq = nullptr;
  int rope_dim = 0;
  bool interleaved = true;
  float pos_scale = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // The kernel set in use: the CPU's instruction set ("avx2"), or the GPU ("cuda sm_90 NVIDIA H200").
  virtual const char* kernels_name() const { return name(); }
  virtual bool supports(BackendOp op, DType weight_type) const = 0;

  virtual size_t workspace_bytes(const WorkspaceQuery& q) const = 0;
  virtual Status bind_workspace(void* base, size_t bytes, const WorkspaceQuery& q) = 0;

  // ---- memory (context creation only; never inside prefill, decode or a probe loop) ----
  // Where KV memories, activation scratch and the workspace live.
  virtual MemorySpace state_space() const = 0;
  // Where map_weights() puts the weights, and how many bytes of that space it takes for a blob
  // of `host_bytes` (0 when the weights are read in place).
  virtual MemorySpace weights_space() const = 0;
  // A key naming what map_weights() makes: contexts whose backends give the same key share one
  // mapping of a model ("cpu", "cuda:0:device copy").
  virtual std::string weights_key() const = 0;
  virtual Status map_weights(const HostRegion* regions, int n_regions, std::shared_ptr<WeightMapping>* out) = 0;
  // One arena of `bytes` in `space` (aligned to 256 bytes); kOutOfMemory when it cannot be had.
  virtual Status allocate(MemorySpace space, size_t bytes, void** out) = 0;
  virtual void release(MemorySpace space, void* p) = 0;
  // Zeroes `bytes` of backend memory (at creation: the first decode must not fault pages in).
  virtual Status zero(MemorySpace space, void* p, size_t bytes) = 0;

  // ---- copies (issued in order with the ops) ----
  // Within backend memory.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Host (any host memory; pinned host is faster on a GPU) -> backend memory, and back. A
  // download's data is in `host_dst` once synchronize() returns. dst == src is a no-op.
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  // Waits for every op issued so far; returns the first failure since the previous call.
  virtual Status synchronize() = 0;

  // ---- ops ----

  // out[t, :] = dequantized table row tokens[t]   tokens: [n] in backend memory; out: [n, table.cols]
  virtual void embed(const WeightView& table, const int32_t* tokens, int n, float* out) = 0;
  // out[t, :] = x[t, :] / rms(x[t, :]) * w                           x, out: [n, dim]
  virtual void rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out) = 0;
  // y_m[t, :] = W_m x[t, :] for up to 3 matrices sharing x (q/k/v, gate/up) in one pass.
  //   x: [n, W.cols]; y_m: [n, W_m.rows]
  virtual void matmul(const WeightView* w, float* const* y, int n_mats, const float* x, int n) = 0;
  // Rotates every head of x in place at positions first_pos + t.    x: [n, n_heads * head_dim]
  virtual void rope(float* x, int n, int n_heads, int head_dim, int first_pos, const float* inv_freq, int rope_dim,
                    bool interleaved, float pos_scale) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  virtual void compress(const CompressArgs& a) = 0;
  // Resets compressor accumulators to the empty state (n_windows x n_kv_heads, d_g, head_dim).
  virtual void compress_reset(float* acc, int n_windows, int n_kv_heads, int d_g, int head_dim) = 0;
  // out = silu(g) * u                                                [n]
  virtual void silu_mul(const float* g, const float* u, float* out, size_t n) = 0;
  // g = x gate^T, u = x up^T, out = silu(g) * u (out may be g): the FFN's first half    [n, rows]
  // as matmul + silu_mul, which a backend may fuse into one op with the same results.
  virtual void matmul_silu(const WeightView& gate, const WeightView& up, float* g, float* u, float* out, const float* x,
                           int n) {
    const WeightView w[2] = {gate, up};
    float* const y[2] = {g, u};
    matmul(w, y, 2, x, n);
    silu_mul(g, u, out, size_t(n) * size_t(gate.rows));
  }
  // x += y                                                           [n]
  virtual void add(float* x, const float* y, size_t n) = 0;
  virtual void ring_write(const RingWriteArgs& a) = 0;
  // *out = the score of `gold` over logits[0..n): see ScoreResult.       logits: [n]; out: [1]
  virtual void gold_score(const float* logits, int n, int32_t gold, ScoreResult* out) = 0;
};

}  // namespace phasekv
