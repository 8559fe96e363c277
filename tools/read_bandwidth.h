// The memory read bandwidth `phasekv bench` divides by for its decode roofline: the fastest
// read loop we know how to write, on the bench's thread count.
#pragma once

namespace phasekv {
namespace tools {

struct ReadBandwidth {
  double gbs = 0;          // best of the repetitions, 1e9 bytes per second
  const char* loop = "";   // "avx2 4x256-bit", "scalar 8-lane"
  double buffer_mib = 0;
};

// `threads` threads each first-touch and then read their own slice of a buffer 8x the last-level
// cache (at least 512 MiB), with independent vector accumulators; best of 5 repetitions.
ReadBandwidth measure_read_bandwidth(int threads);

}  // namespace tools
}  // namespace phasekv
