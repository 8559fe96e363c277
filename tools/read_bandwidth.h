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

}  // namespace tools
}  // namespace phasekv
