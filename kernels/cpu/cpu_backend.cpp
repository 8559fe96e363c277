#include "cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace phasekv {

CpuBackend::CpuBackend(int n_threads, const cpu::KernelTable* table, cpu::MatmulMode mode)
    : k_(table ? *table : cpu::kernels()), mode_(mode), pool_(n_threads) {
  name_ = mode_ == cpu::MatmulMode::Reference ? std::string(k_.name)
                                              : std::string(cpu::matmul_mode_name(mode_)) + " " + k_.q8_isa;
}

const char* CpuBackend::kernels_name() const { return name_.c_str(); }

bool CpuBackend::supports(BackendOp op, DType t) const {
  (void)op;
  return dtype_info(uint8_t(t)) != nullptr;  // every op, every dtype
}

namespace {

// The CPU reads the weights where they are.
class InPlaceWeights final : public WeightMapping {
 public:
  InPlaceWeights(const HostRegion* r, int n) {
    for (int i = 0; i < n; ++i) {
      const uint8_t* p = static_cast<const uint8_t*>(r[i].data);
      regions_.push_back({p, r[i].bytes, p});
    }
  }
};

// In place too, except the matrices only matmul reads that fit the R16 layout (Q4_0, Q4_1, Q8_0,
// where the kernels have R16) or else the R4 layout (the same types, where they have R4; cpu_kernels.h WeightLayout):
// those are read from a copy in that layout, made when a context first asks for the matrix
// (Context::bind_weights, never a prefill or decode) and shared by every later context of the
// model that repacks the same way (weights_key "cpu-r16-r4" / "cpu-r16" / "cpu-r4"). The copy has the file's
// size, and the file's pages of the copied matrix leave the resident set (drop_file_pages).
class RepackedWeights final : public WeightMapping {
 public:
  RepackedWeights(const HostRegion* r, int n, bool r16, bool r4) : host_(r, r + n), r16_(r16), r4_(r4) {
    for (int i = 0; i < n; ++i) {
      const uint8_t* p = static_cast<const uint8_t*>(r[i].data);
      regions_.push_back({p, r[i].bytes, p});
    }
    mode_ = r16 && r4 ? "host, q8 R16/R4 copies of the matmul weights"
            : r16     ? "host, q8 R16 copies of the matmul weights"
                      : "host, q8 R4 copies of the matmul weights";
  }
  ~RepackedWeights() override {
    for (const Copy& c : copies_) std::free(c.data);
  }
  Status view(const WeightView& host, bool matmul_only, WeightView* out) const override {
    PKV_RETURN_IF_ERROR(WeightMapping::view(host, matmul_only, out));
    const bool r16 = r16_ && cpu::r16_fits(host.dtype, host.rows, host.cols);
    if (!matmul_only || !out->data || !(r16 || (r4_ && cpu::r4_fits(host.dtype, host.rows, host.cols)))) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);
    const Copy* c = nullptr;
    for (const Copy& e : copies_)
      if (e.src == out->data && e.dtype == host.dtype && e.rows == host.rows && e.cols == host.cols) c = &e;
    if (!c) {
      const size_t bytes = r16 ? cpu::r16_bytes(host.dtype, host.rows, host.cols) : cpu::r4_bytes(host.dtype, host.rows, host.cols);
      void* p = nullptr;
      if (posix_memalign(&p, 64, bytes) != 0 || !p)
        return make_error(StatusCode::kOutOfMemory, "cannot allocate %zu bytes of host memory for the %s copy of a %d x %d %s matrix",
                          bytes, r16 ? "R16" : "R4", host.rows, host.cols, dtype_name(host.dtype));
      if (r16)
        cpu::repack_r16(host.dtype, out->data, host.row_bytes, host.rows, host.cols, p);
      else
        cpu::repack_r4(host.dtype, out->data, host.row_bytes, host.rows, host.cols, p);
      drop_file_pages(out->data, host.row_bytes * size_t(host.rows));
      copies_.push_back({out->data, host.dtype, host.rows, host.cols, static_cast<uint8_t*>(p)});
      bytes_ += bytes;
      c = &copies_.back();
    }
    out->data = c->data;
    out->layout = uint8_t(r16 ? cpu::WeightLayout::R16 : cpu::WeightLayout::R4);
    out->aux = c->data + (r16 ? cpu::r16_hdr_offset(host.dtype, host.rows, host.cols) : cpu::r4_hdr_offset(host.dtype, host.rows, host.cols));
    return Status::Ok();
  }

 private:
  struct Copy {
    const void* src;
    DType dtype;
    int rows, cols;
    uint8_t* data;  // the copy, R4 or R16 (64-byte aligned: the R16 kernels' loads)
  };
  // The copied matrix's whole pages of a mapped model file leave the process's resident set (the
  // page cache keeps them): what is resident is then the copy instead of the file's pages, not
  // both. The pages it shares with a neighbour stay; a later read of a dropped page (a tied
  // embedding's row, a reference-mode context of the same model) faults it back from the file,
  // as the first read of a mapped page always does.
  void drop_file_pages(const void* data, size_t bytes) const {
    const uintptr_t p = uintptr_t(data), page = uintptr_t(sysconf(_SC_PAGESIZE));
    for (const HostRegion& r : host_) {
      const uintptr_t b = uintptr_t(r.data);
      if (!r.file_mapped || p < b || p + bytes > b + r.bytes) continue;
      const uintptr_t lo = (p + page - 1) & ~(page - 1), hi = (p + bytes) & ~(page - 1);
      if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // a hint: a failure changes nothing
    }
  }
  std::vector<HostRegion> host_;
  bool r16_, r4_;  // the kernels read R16 / R4 copies (Q4_0, Q4_1, Q8_0)
  mutable std::mutex mu_;
  mutable std::vector<Copy> copies_;
};

}  // namespace

bool CpuBackend::repacks_weights() const {
  return mode_ != cpu::MatmulMode::Reference && (has_r4() || has_r16());
}

Status CpuBackend::map_weights(const HostRegion* regions, int n_regions, std::shared_ptr<WeightMapping>* out) {
  if (repacks_weights())
    *out = std::make_shared<RepackedWeights>(regions, n_regions, has_r16(), has_r4());
  else
    *out = std::make_shared<InPlaceWeights>(regions, n_regions);
  return Status::Ok();
}

Status CpuBackend::allocate(MemorySpace space, size_t bytes, void** out) {
  if (space == MemorySpace::Device)
    return make_error(StatusCode::kInternal, "cpu backend: no device memory (asked for %zu bytes)", bytes);
  // posix_memalign, not mimalloc: libphasekv.so must not bring an allocator that overrides
  // malloc/new into a process that dlopens it (README, "Dependencies").
  *out = nullptr;
  if (posix_memalign(out, 256, bytes ? bytes : 1) != 0) *out = nullptr;
  if (!*out) return make_error(StatusCode::kOutOfMemory, "cannot allocate %zu bytes of host memory", bytes);
  return Status::Ok();
}

void CpuBackend::release(MemorySpace, void* p) {
  std::free(p);
}

Status CpuBackend::zero(MemorySpace, void* p, size_t bytes) {
  std::memset(p, 0, bytes);
  return Status::Ok();
}

void CpuBackend::copy(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBackend::ring_write(const RingWriteArgs& a) {
  if (a.ring_rows <= 0) return;
  const int keep = std::min(a.n_tokens, a.ring_rows);
  const size_t kvd = size_t(a.kvd);
  for (int t = a.n_tokens - keep; t < a.n_tokens; ++t) {
    const size_t row = size_t(a.first_pos + t) % size_t(a.ring_rows);
    std::memcpy(a.ring_k + row * kvd, a.k_rows + size_t(t) * kvd, kvd * sizeof(float));
    std::memcpy(a.ring_v + row * kvd, a.v_rows + size_t(t) * kvd, kvd * sizeof(float));
  }
}

void CpuBackend::gold_score(const float* lg, int n, int32_t gold, ScoreResult* out) {
  float mx = lg[0];
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (lg[i] > mx) {
      mx = lg[i];
      best = i;
    }
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(double(lg[i]) - double(mx));
  out->nll = std::log(sum) - (double(lg[gold]) - double(mx));
  out->argmax = best;
  out->hit = best == gold ? 1 : 0;
}

namespace {
// The q8 modes' quantized activations: one block per 32 inputs of every token of a chunk, sized
// for the larger BlockQ8x2 (q8x2) whatever the mode, so that the plan does not depend on it.
size_t q8_bytes(const WorkspaceQuery& q) {
  static_assert(sizeof(cpu::BlockQ8x2) >= sizeof(cpu::BlockQ8x), "the q8x2 block is the larger");
  return ((size_t(q.max_tokens) * size_t(q.max_k / 32) * sizeof(cpu::BlockQ8x2)) + 63) & ~size_t(63);
}
}  // namespace

size_t CpuBackend::workspace_bytes_for(const WorkspaceQuery& q, int n_threads) {
  const size_t per_thread =
      std::max<size_t>(size_t(4) * size_t(q.max_k), size_t(q.n_ctx) * size_t(std::max(q.attention_group, 1)));
  return size_t(n_threads) * ((per_thread + 15) & ~size_t(15)) * sizeof(float) + q8_bytes(q);
}

size_t CpuBackend::workspace_bytes(const WorkspaceQuery& q) const { return workspace_bytes_for(q, pool_.size()); }

Status CpuBackend::bind_workspace(void* base, size_t bytes, const WorkspaceQuery& q) {
  if (bytes < workspace_bytes(q))
    return make_error(StatusCode::kInternal, "cpu backend: workspace of %zu bytes, %zu needed", bytes,
                      workspace_bytes(q));
  scratch_ = static_cast<float*>(base);
  scratch_stride_ = (std::max<size_t>(size_t(4) * size_t(q.max_k),
                                      size_t(q.n_ctx) * size_t(std::max(q.attention_group, 1))) +
                     15) &
                    ~size_t(15);
  xq_ = reinterpret_cast<cpu::BlockQ8x*>(static_cast<uint8_t*>(base) + size_t(pool_.size()) * scratch_stride_ * sizeof(float));
  xq2_ = reinterpret_cast<cpu::BlockQ8x2*>(xq_);  // the same bytes: one mode per backend
  xq_tokens_ = q.max_tokens;
  return Status::Ok();
}

void CpuBackend::embed(const WeightView& table, const int32_t* tokens, int n, float* out) {
  for (int t = 0; t < n; ++t)
    k_.dequant_row(table.dtype, static_cast<const uint8_t*>(table.data) + size_t(tokens[t]) * table.row_bytes,
                   out + size_t(t) * table.cols, table.cols);
}

void CpuBackend::rmsnorm(const float* x, const float* w, float eps, int n, int dim, float* out) {
  for (int t = 0; t < n; ++t) cpu::rmsnorm(x + size_t(t) * dim, w, eps, out + size_t(t) * dim, dim);
}

// One matmul op's work (matmul, matmul_silu), read by its tasks.
struct MatmulJob {
  const cpu::KernelTable* k;
  cpu::MatmulArgs args[3];
  int rows[3];
  bool q8[3];     // this matrix through the q8 kernels
  bool x2;        // ... the q8x2 ones
  int row_block;
  int blocks[3];  // row blocks per matrix
  float* scratch;
  size_t scratch_stride;
  // matmul_silu: a task's rows of both matrices, then silu(y0) * y1 on them into silu_out
  void (*silu)(const float* g, const float* u, float* out, int n) = nullptr;
  float* silu_out = nullptr;
};

namespace {

void matmul_rows(const MatmulJob& j, int m, int r0, int r1, int thread) {
  if (j.q8[m] && j.args[m].w_layout == cpu::WeightLayout::R16) (j.x2 ? j.k->matmul_q8x2_rows_r16 : j.k->matmul_q8_rows_r16)(j.args[m], r0, r1);
  else if (j.q8[m] && j.args[m].w_layout == cpu::WeightLayout::R4) (j.x2 ? j.k->matmul_q8x2_rows_r4 : j.k->matmul_q8_rows_r4)(j.args[m], r0, r1);
  else if (j.q8[m]) (j.x2 ? j.k->matmul_q8x2_rows : j.k->matmul_q8_rows)(j.args[m], r0, r1);
  else j.k->matmul_rows(j.args[m], r0, r1, j.scratch + size_t(thread) * j.scratch_stride);
}

void matmul_task(void* ctx, int task, int thread) {
  MatmulJob& j = *static_cast<MatmulJob*>(ctx);
  int m = 0;
  while (task >= j.blocks[m]) task -= j.blocks[m++];
  const int r0 = task * j.row_block;
  const int r1 = std::min(j.rows[m], r0 + j.row_block);
  matmul_rows(j, m, r0, r1, thread);
}

// matmul_silu's task: rows [r0, r1) of the gate and the up matrix, then the element-wise
// silu(g) * u of those rows for every token (each element from its own g and u: the same bits
// as silu_mul over the whole product, for any split).
void matmul_silu_task(void* ctx, int task, int thread) {
  MatmulJob& j = *static_cast<MatmulJob*>(ctx);
  const int r0 = task * j.row_block;
  const int r1 = std::min(j.rows[0], r0 + j.row_block);
  matmul_rows(j, 0, r0, r1, thread);
  matmul_rows(j, 1, r0, r1, thread);
  for (int t = 0; t < j.args[0].n_tok; ++t) {
    const size_t o = size_t(t) * size_t(j.args[0].ldy) + size_t(r0);
    j.silu(j.args[0].y + o, j.args[1].y + o, j.silu_out + o, r1 - r0);
  }
}

struct QuantizeJob {
  const cpu::KernelTable* k;
  const float* x;
  cpu::BlockQ8x* xq;
  cpu::BlockQ8x2* xq2;  // q8x2 mode (else nullptr)
  int k_in;
};

void quantize_task(void* ctx, int t, int /*thread*/) {
  QuantizeJob& j = *static_cast<QuantizeJob*>(ctx);
  if (j.xq2)
    j.k->quantize_q8x2(j.x + size_t(t) * j.k_in, j.xq2 + size_t(t) * (j.k_in / 32), j.k_in);
  else
    j.k->quantize_q8(j.x + size_t(t) * j.k_in, j.xq + size_t(t) * (j.k_in / 32), j.k_in);
}

}  // namespace

void CpuBackend::matmul(const WeightView* w, float* const* y, int n_mats, const float* x, int n) {
  MatmulJob j;
  const int tasks = prepare_matmul(&j, w, y, n_mats, x, n, false);
  pool_.run(tasks, matmul_task, &j);
}

// The FFN's gate and up products and silu(gate) * up in one pool op (decode issued them as two,
// each ending in a wait for the slower thread): a task computes its rows of both matrices
// and then their silu. The same kernels on the same rows, an element-wise silu: the same bits
// as matmul + silu_mul.
void CpuBackend::matmul_silu(const WeightView& gate, const WeightView& up, float* g, float* u, float* out, const float* x,
                             int n) {
  PKV_ASSERT(gate.rows == up.rows && gate.cols == up.cols);
  MatmulJob j;
  const WeightView w[2] = {gate, up};
  float* const y[2] = {g, u};
  const int tasks = prepare_matmul(&j, w, y, 2, x, n, true);
  j.silu = mode_ != cpu::MatmulMode::Reference ? k_.silu_mul_q8 : cpu::silu_mul;
  j.silu_out = out;
  pool_.run(tasks, matmul_silu_task, &j);
}

// The job of one matmul op; returns its task count. paired: the matrices' rows in step (tasks =
// row blocks of the first matrix, each covering the same rows of every matrix).
int CpuBackend::prepare_matmul(MatmulJob* jp, const WeightView* w, float* const* y, int n_mats, const float* x, int n,
                               bool paired) {
  MatmulJob& j = *jp;
  j.k = &k_;
  j.scratch = scratch_;
  j.scratch_stride = scratch_stride_;
  j.x2 = mode_ == cpu::MatmulMode::Q8X2;
  int total_rows = 0;
  for (int m = 0; m < n_mats; ++m) total_rows += w[m].rows;
  if (paired) total_rows = w[0].rows;
  // Enough blocks to balance the threads; multiples of 4 rows (the kernel's row tile). The pool
  // gives each thread a contiguous range of them and lets a thread that finishes early take
  // tasks from another's range, so a grab is an atomic on a line of the thread's own until the
  // end: 8 blocks per thread decode 1.13x faster than the shared counter with 4 (SmolLM2 q8x2,
  // 2 threads, Zen 4 host: median of the per-round ratios over 16 interleaved rounds; the shared
  // counter with 8 was slower than with 4; ranges with 4, 16 or 32 within the noise of 8:
  // docs/PERFORMANCE.md, twenty-first session).
#ifndef PKV_MATMUL_TASKS_PER_THREAD
#define PKV_MATMUL_TASKS_PER_THREAD 8
#endif
  // Row blocks whole tiles of every matrix's layout: 16 rows in R16, else 4.
  int tile = 4;
  for (int m = 0; m < n_mats; ++m)
    if (w[m].layout == uint8_t(cpu::WeightLayout::R16)) tile = 16;
  int block = total_rows / (pool_.size() * PKV_MATMUL_TASKS_PER_THREAD);
  block = std::max(tile, (block + tile - 1) / tile * tile);
  j.row_block = block;
  int tasks = 0;
  bool quantized = false;  // x quantized once for every matrix that shares it
  for (int m = 0; m < n_mats; ++m) {
    j.args[m] = cpu::MatmulArgs{w[m].dtype, w[m].data, w[m].row_bytes, x, y[m], w[m].cols, n, w[m].rows};
    j.q8[m] = mode_ != cpu::MatmulMode::Reference && cpu::q8_supported(w[m].dtype) && w[m].cols % 32 == 0 &&
              n <= xq_tokens_ && xq_;
    if (w[m].layout != uint8_t(cpu::WeightLayout::Rows)) {  // R4 / R16: only the q8 kernels read it (RepackedWeights)
      PKV_ASSERT(j.q8[m] && repacks_weights());
      j.args[m].w_layout = cpu::WeightLayout(w[m].layout);
      j.args[m].w_hdr = w[m].aux;
    }
    if (j.q8[m]) {
      if (!quantized) {
        QuantizeJob qj{&k_, x, xq_, j.x2 ? xq2_ : nullptr, w[m].cols};
        if (n >= 8) {
          pool_.run(n, quantize_task, &qj);
        } else {
          for (int t = 0; t < n; ++t) quantize_task(&qj, t, 0);
        }
        quantized = true;
      }
      if (j.x2)
        j.args[m].xq2 = xq2_;
      else
        j.args[m].xq = xq_;
    }
    j.rows[m] = w[m].rows;
    j.blocks[m] = (w[m].rows + block - 1) / block;
    tasks += j.blocks[m];
  }
  return paired ? j.blocks[0] : tasks;
}

void CpuBackend::rope(float* x, int n, int n_heads, int head_dim, int first_pos, const float* inv_freq, int rope_dim,
                      bool interleaved, float pos_scale) {
  const int half = rope_dim / 2;
  for (int t = 0; t < n; ++t) {
    // One position's tables serve every rope at that position: decode ropes Q and K of every
    // layer at the same position, so the sines and cosines are computed once per token, not
    // twice per layer (the same std::cos / std::sin calls: the same bits).
    const float pos = float(first_pos + t) * pos_scale;
    if (!(rope_cache_.valid && rope_cache_.pos == pos && rope_cache_.half == half &&
          std::memcmp(rope_cache_.inv_freq, inv_freq, sizeof(float) * size_t(half)) == 0)) {
      for (int i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[i];
        rope_cache_.cos_t[i] = std::cos(angle);
        rope_cache_.sin_t[i] = std::sin(angle);
      }
      rope_cache_.valid = true;
      rope_cache_.pos = pos;
      std::memcpy(rope_cache_.inv_freq, inv_freq, sizeof(float) * size_t(half));
      rope_cache_.half = half;
    }
    for (int h = 0; h < n_heads; ++h)
      cpu::rope_apply(x + size_t(t) * n_heads * head_dim + size_t(h) * head_dim, rope_cache_.cos_t,
                      rope_cache_.sin_t, rope_dim, interleaved);
  }
}

namespace {

struct AttentionJob {
  const cpu::KernelTable* k;
  const AttentionArgs* a;
  float* scratch;
  size_t scratch_stride;
  int splits;  // query heads of a GQA group split into this many tasks (decode: more tasks than KV heads)
  void (*softmax)(float* x, int n);  // cpu::softmax, or the q8 mode's k->softmax_q8
};

// One (token, KV head): the query heads sharing that KV head (GQA group), one after the other
// over the same K and V rows (cache-resident after the first). Per query head the arithmetic is
// exactly that of a head on its own: scores over the visible keys in a fixed order (entries,
// then exact tokens oldest first; dot_rows: each score dot's value), softmax, weighted sum of
// values in the same order (axpy_rows: axpy's operations row by row). The sequence is the same
// whatever chunk the token arrives in.
void attention_task(void* ctx, int task, int thread) {
  AttentionJob& j = *static_cast<AttentionJob*>(ctx);
  const AttentionArgs& a = *j.a;
  const int part = task % j.splits;
  task /= j.splits;
  const int t = task / a.n_kv_heads, kvh = task % a.n_kv_heads;
  const int full_group = a.n_heads / a.n_kv_heads;
  // This task's query heads of the group: [g_lo, g_lo + group).
  const int g_lo = full_group * part / j.splits;
  const int group = full_group * (part + 1) / j.splits - g_lo;
  const int hd = a.head_dim;
  const size_t q_stride = size_t(a.n_heads) * hd, kv_stride = size_t(a.n_kv_heads) * hd;
  const size_t kv_off = size_t(kvh) * hd;
  const int pos = a.first_pos + t;

  const int n_ent = a.stride > 0 ? (pos + 1) / a.stride : 0;
  const int lo = a.local < 0 ? 0 : std::max(0, pos - a.local + 1);
  const int n_exact = pos + 1 - lo;  // 0 when local == 0
  const int n_keys = n_ent + n_exact;
  // The exact tokens lo..pos as runs of rows kv_stride apart, in order: fn(first p, count, row
  // of the first). Full attention: the cache; a local window: the ring (p < first_pos, split
  // where it wraps), then the chunk.
  auto runs = [&](const float* cache, const float* chunk, auto fn) {
    if (a.local < 0) {
      if (pos >= lo) fn(lo, pos + 1 - lo, cache + size_t(lo) * kv_stride + kv_off);
      return;
    }
    for (int p = lo; p <= std::min(pos, a.first_pos - 1);) {
      const int r = p % a.ring_rows;
      const int n = std::min(std::min(pos, a.first_pos - 1) + 1 - p, a.ring_rows - r);
      fn(p, n, cache + size_t(r) * kv_stride + kv_off);
      p += n;
    }
    const int c0 = std::max(lo, a.first_pos);
    if (pos >= c0) fn(c0, pos + 1 - c0, chunk + size_t(c0 - a.first_pos) * kv_stride + kv_off);
  };
  // scores[g * n_keys + i] for query head h0 + g.
  float* scores = j.scratch + size_t(thread) * j.scratch_stride;
  const int h0 = kvh * full_group + g_lo;
  const float* q = a.q + size_t(t) * q_stride + size_t(h0) * hd;
  float* out = a.out + size_t(t) * q_stride + size_t(h0) * hd;
  for (int i = 0; i < group * hd; ++i) out[i] = 0.0f;
  if (n_keys == 0) return;
  for (int g = 0; g < group; ++g) {
    const float* qg = q + size_t(g) * hd;
    float* sc = scores + size_t(g) * n_keys;
    if (n_ent > 0) j.k->dot_rows(qg, a.k_entries + kv_off, kv_stride, n_ent, hd, a.scale, sc);
    runs(a.k_cache, a.k_chunk, [&](int p, int n, const float* k) { j.k->dot_rows(qg, k, kv_stride, n, hd, a.scale, sc + n_ent + (p - lo)); });
  }
  for (int g = 0; g < group; ++g) {
    float* sc = scores + size_t(g) * n_keys;
    if (a.sink) {
      // Softmax with one extra logit in the denominator.
      const float sink = a.sink[h0 + g];
      float mx = sink;
      for (int i = 0; i < n_keys; ++i) mx = sc[i] > mx ? sc[i] : mx;
      float sum = std::exp(sink - mx);
      for (int i = 0; i < n_keys; ++i) {
        sc[i] = std::exp(sc[i] - mx);
        sum = sum + sc[i];
      }
      const float inv = 1.0f / sum;
      for (int i = 0; i < n_keys; ++i) sc[i] = sc[i] * inv;
    } else {
      j.softmax(sc, n_keys);
    }
  }
  // Each output element: the entries' values, then the exact tokens', in order (axpy_rows
  // applies a run's rows in order, the same operations as one axpy per row).
  for (int g = 0; g < group; ++g) {
    const float* sc = scores + size_t(g) * n_keys;
    float* og = out + size_t(g) * hd;
    if (n_ent > 0) j.k->axpy_rows(sc, a.v_entries + kv_off, kv_stride, n_ent, og, hd);
    runs(a.v_cache, a.v_chunk, [&](int p, int n, const float* v) { j.k->axpy_rows(sc + n_ent + (p - lo), v, kv_stride, n, og, hd); });
  }
}

struct CompressJob {
  const CompressArgs* a;
};

// One (branch, KV head): the chunk's tokens in order through the open windows.
void compress_task(void* ctx, int task, int /*thread*/) {
  const CompressArgs& a = *static_cast<CompressJob*>(ctx)->a;
  const int br = task / a.n_kv_heads, h = task % a.n_kv_heads;
  const CompressArgs::Branch& b = a.b[br];
  const int W = a.window, S = a.stride, hd = a.head_dim, dg = a.d_g;
  const int n_acc = (W + S - 1) / S;
  const size_t G = size_t(a.n_kv_heads) * dg, kvd = size_t(a.n_kv_heads) * hd;
  const size_t acc_row = size_t(2 * dg + hd);
  for (int t = 0; t < a.n_tokens; ++t) {
    const int p = a.first_pos + t;
    // Windows j with (j+1)S - W <= p <= (j+1)S - 1.
    const int j_first = p / S, j_end = (p + W) / S;
    for (int jw = j_first; jw < j_end; ++jw) {
      const int slot = p - ((jw + 1) * S - W);
      float* acc = b.acc + (size_t(jw % n_acc) * a.n_kv_heads + h) * acc_row;
      float* mx = acc;
      float* den = acc + dg;
      float* sum = acc + 2 * dg;
      const float* x = b.payload + size_t(t) * b.payload_stride + (b.payload_per_offset ? size_t(slot) * kvd : 0) +
                       size_t(h) * hd;
      const float* g = b.gate ? b.gate + size_t(t) * b.gate_stride + (b.gate_per_offset ? size_t(slot) * G : 0) +
                                    size_t(h) * dg
                              : nullptr;
      const float* bias = b.bias ? b.bias + size_t(slot) * G + size_t(h) * dg : nullptr;
      for (int c = 0; c < dg; ++c) {
        const float s = (g ? g[c] : 0.0f) + (bias ? bias[c] : 0.0f);
        const float m_new = s > mx[c] ? s : mx[c];
        const float keep = std::exp(mx[c] - m_new);  // 0 on the first slot (max = -inf)
        const float e = std::exp(s - m_new);
        den[c] = den[c] * keep + e;
        mx[c] = m_new;
        if (dg == 1) {
          for (int i = 0; i < hd; ++i) sum[i] = sum[i] * keep + e * x[i];
        } else {
          sum[c] = sum[c] * keep + e * x[c];
        }
      }
    }
    if ((p + 1) % S != 0) continue;
    // Emit entry j = (p+1)/S - 1 and reset its accumulator for window j + n_acc.
    const int j = (p + 1) / S - 1;
    float* acc = b.acc + (size_t(j % n_acc) * a.n_kv_heads + h) * acc_row;
    float* out = b.entries + size_t(j) * kvd + size_t(h) * hd;
    for (int i = 0; i < hd; ++i) out[i] = acc[2 * dg + i] / acc[dg + (dg == 1 ? 0 : i)];
    for (int c = 0; c < dg; ++c) {
      acc[c] = -INFINITY;
      acc[dg + c] = 0.0f;
    }
    for (int i = 0; i < hd; ++i) acc[2 * dg + i] = 0.0f;
    if (br == 0 && a.rotate_entry) {
      if (a.entry_norm) cpu::rmsnorm(out, a.entry_norm, a.norm_eps, out, hd);
      float cos_t[512], sin_t[512];
      const float epos = float(j * S) * a.pos_scale;
      for (int i = 0; i < a.rope_dim / 2; ++i) {
        const float angle = epos * a.inv_freq[i];
        cos_t[i] = std::cos(angle);
        sin_t[i] = std::sin(angle);
      }
      cpu::rope_apply(out, cos_t, sin_t, a.rope_dim, a.interleaved);
    }
  }
}

}  // namespace

void CpuBackend::attention(const AttentionArgs& a) {
  // Decode has only n_kv_heads (token, KV head) tasks: split each GQA group into single query
  // heads when that is too few to keep every thread busy. Per query head the arithmetic is the
  // same either way (see attention_task), so the split changes no bit.
  const int group = a.n_heads / a.n_kv_heads;
  const int splits = a.n_tokens * a.n_kv_heads < 2 * pool_.size() ? group : 1;
  AttentionJob j{&k_, &a, scratch_, scratch_stride_, splits, mode_ != cpu::MatmulMode::Reference ? k_.softmax_q8 : cpu::softmax};
  pool_.run(a.n_tokens * a.n_kv_heads * splits, attention_task, &j);
}

void CpuBackend::compress(const CompressArgs& a) {
  CompressJob j{&a};
  pool_.run(2 * a.n_kv_heads, compress_task, &j);
}

void CpuBackend::compress_reset(float* acc, int n_windows, int n_kv_heads, int d_g, int head_dim) {
  const size_t row = size_t(2 * d_g + head_dim);
  for (size_t r = 0; r < size_t(n_windows) * size_t(n_kv_heads); ++r) {
    float* p = acc + r * row;
    for (int c = 0; c < d_g; ++c) {
      p[c] = -INFINITY;
      p[d_g + c] = 0.0f;
    }
    for (int i = 0; i < head_dim; ++i) p[2 * d_g + i] = 0.0f;
  }
}

namespace {
struct SiluJob {
  void (*fn)(const float* g, const float* u, float* out, int n);  // cpu::silu_mul, or the q8 mode's
  const float *g, *u;
  float* out;
  size_t n, chunk;
};
void silu_task(void* ctx, int task, int /*thread*/) {
  const SiluJob& j = *static_cast<const SiluJob*>(ctx);
  const size_t b = size_t(task) * j.chunk, e = std::min(j.n, b + j.chunk);
  j.fn(j.g + b, j.u + b, j.out + b, int(e - b));
}
}  // namespace

// Element-wise, so split across the pool (an exp per element: in decode the other threads
// would otherwise wait ~8 us per layer for the caller); any split gives the same bits.
void CpuBackend::silu_mul(const float* g, const float* u, float* out, size_t n) {
  constexpr size_t kMinChunk = 512;
  const auto fn = mode_ != cpu::MatmulMode::Reference ? k_.silu_mul_q8 : cpu::silu_mul;
  const int tasks = int(std::min<size_t>(size_t(pool_.size()), n / kMinChunk));
  if (tasks <= 1) return fn(g, u, out, int(n));
  SiluJob j{fn, g, u, out, n, (n + size_t(tasks) - 1) / size_t(tasks)};
  pool_.run(tasks, silu_task, &j);
}

void CpuBackend::add(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

}  // namespace phasekv
