// How much physical memory this process can still take: the kernel's estimate of memory
// available without swapping (/proc/meminfo MemAvailable) and the room left under the memory
// limit of the process's cgroup (v2: memory.max − memory.current; v1: memory.limit_in_bytes −
// memory.usage_in_bytes), whichever is smaller.
//
// A context whose plan exceeds it is refused at creation with kOutOfMemory: its arena is
// zeroed at creation (every page touched), so on Linux's overcommit the alternative is the
// OOM killer taking this process — or another one — down later.
#pragma once

#include <cstdint>
#include <string>

namespace phasekv {

struct HostMemory {
  uint64_t available = 0;  // bytes this process can still take (min of the known limits)
  bool known = false;      // false: nothing could be read (not Linux, no /proc): no check
  std::string source;      // what bounds it, e.g. "MemAvailable 3.2 GiB" or "cgroup memory.max ..."
};

// Reads /proc and /sys/fs/cgroup now. Allocates a little (file reads): call it at creation,
// never on the decode path.
HostMemory host_memory_available();

// The parsers, exposed for tests on hand-written file contents.
// /proc/meminfo: MemAvailable in bytes; false when the line is missing.
bool parse_meminfo_available(const std::string& meminfo, uint64_t* bytes);
// cgroup v2 memory.max ("max" or a byte count); false for "max" (no limit) or garbage.
bool parse_cgroup_limit(const std::string& text, uint64_t* bytes);
// /proc/self/cgroup: the v2 path (the "0::PATH" line), or "" when there is none.
std::string parse_cgroup_v2_path(const std::string& proc_self_cgroup);

}  // namespace phasekv
