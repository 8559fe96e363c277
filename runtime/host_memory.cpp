#include "host_memory.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace phasekv {

namespace {

bool read_small_file(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// A decimal byte count followed by optional whitespace, nothing else.
bool parse_u64(const std::string& text, uint64_t* out) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  if (i == text.size() || text[i] < '0' || text[i] > '9') return false;
  uint64_t v = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const uint64_t d = uint64_t(text[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  for (; i < text.size(); ++i)
    if (text[i] != ' ' && text[i] != '\t' && text[i] != '\n') return false;
  *out = v;
  return true;
}

std::string gib(uint64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}

}  // namespace

bool parse_meminfo_available(const std::string& meminfo, uint64_t* bytes) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 13, "MemAvailable:") != 0) continue;
    unsigned long long kib = 0;
    char unit[8] = {0};
    if (std::sscanf(line.c_str() + 13, " %llu %7s", &kib, unit) < 1) return false;
    if (unit[0] && std::string(unit) != "kB") return false;
    if (kib > UINT64_MAX / 1024) return false;
    *bytes = uint64_t(kib) * 1024;
    return true;
  }
  return false;
}

bool parse_cgroup_limit(const std::string& text, uint64_t* bytes) { return parse_u64(text, bytes); }

std::string parse_cgroup_v2_path(const std::string& proc_self_cgroup) {
  std::istringstream in(proc_self_cgroup);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, 3, "0::") == 0) return line.substr(3);
  return std::string();
}

HostMemory host_memory_available() {
  HostMemory m;
  std::string text;
  uint64_t v = 0;
  if (read_small_file("/proc/meminfo", &text) && parse_meminfo_available(text, &v)) {
    m.available = v;
    m.known = true;
    m.source = "MemAvailable " + gib(v);
  }
  // The cgroup's limit: v2 at the process's own cgroup (and its parents up to the root, the
  // tightest one binding), else v1's memory controller.
  auto consider = [&](uint64_t limit, uint64_t usage, const std::string& where) {
    const uint64_t room = limit > usage ? limit - usage : 0;
    if (!m.known || room < m.available) {
      m.available = room;
      m.known = true;
      m.source = "cgroup " + where + " limit " + gib(limit) + ", " + gib(usage) + " in use";
    }
  };
  if (read_small_file("/proc/self/cgroup", &text)) {
    std::string path = parse_cgroup_v2_path(text);
    if (!path.empty()) {
      for (;;) {
        const std::string dir = "/sys/fs/cgroup" + (path == "/" ? std::string() : path);
        std::string max_text, cur_text;
        uint64_t limit = 0, usage = 0;
        if (read_small_file(dir + "/memory.max", &max_text) && parse_cgroup_limit(max_text, &limit) &&
            read_small_file(dir + "/memory.current", &cur_text) && parse_u64(cur_text, &usage))
          consider(limit, usage, dir + "/memory.max");
        if (path == "/" || path.empty()) break;
        const size_t slash = path.find_last_of('/');
        path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
      }
    }
  }
  std::string lim_text, use_text;
  uint64_t limit = 0, usage = 0;
  if (read_small_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", &lim_text) &&
      parse_u64(lim_text, &limit) && limit < (1ull << 60) &&  // v1 says "no limit" with a huge number
      read_small_file("/sys/fs/cgroup/memory/memory.usage_in_bytes", &use_text) && parse_u64(use_text, &usage))
    consider(limit, usage, "memory.limit_in_bytes");
  return m;
}

}  // namespace phasekv
