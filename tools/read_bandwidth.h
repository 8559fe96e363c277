// The memory read bandwidth `phasekv bench` divides by for its decode roofline: the fastest
// read loop we know how to write, on the bench's thread count.
#pragma once

#include <cstddef>

namespace phasekv {
namespace tools {

struct ReadBandwidth {
  double gbs = 0;          // best of the repetitions, 1e9 bytes per second
  const char* loop = "";   // "avx2 4x256-bit", "scalar 8-lane"
  double buffer_mib = 0;
};

// `threads` threads each first-touch and then read their own slice of a buffer with independent
// vector accumulators; best of the repetitions. working_set = 0: a buffer 8x the last-level cache (at
// least 512 MiB), best of 5 -- the DRAM bandwidth. working_set > 0: a buffer of that size, read once
// to warm it and then repeatedly (best of 20 and of at least 0.5 s) -- the bandwidth of a working
// set that size, re-read as decode re-reads its weights every token: where it fits, wholly or in
// part, in the last-level cache, that rate is above DRAM's.
ReadBandwidth measure_read_bandwidth(int threads, size_t working_set = 0);

// The working-set loop kept between measurements: its buffer allocated and first-touched once,
// so that bench can measure the bandwidth right after each decode repetition. On a shared host
// the neighbours and the hypervisor's placement of the vCPUs change the bandwidth from one second
// to the next (the two vCPUs of the Zen 4 dev VM read 33-35 GB/s in most runs and 61 GB/s in
// some: docs/PERFORMANCE.md, twenty-first session), so a ceiling measured a few seconds away
// from the decode it divides is another machine's.
class WorkingSetReader {
 public:
  WorkingSetReader(int threads, size_t bytes);
  ~WorkingSetReader();
  WorkingSetReader(const WorkingSetReader&) = delete;
  WorkingSetReader& operator=(const WorkingSetReader&) = delete;
  bool ok() const { return buf_ != nullptr; }
  // Reads the buffer once to warm it, then repeatedly, each thread its slice 4 times per
  // repetition, for at least min_reps repetitions and min_seconds; returns the best, GB/s.
  double measure(int min_reps, double min_seconds);
  double buffer_mib() const { return double(bytes_) / (1 << 20); }

 private:
  int threads_;
  size_t bytes_ = 0, n_ = 0;
  float* buf_ = nullptr;
  float sink_ = 0;
};

}  // namespace tools
}  // namespace phasekv
