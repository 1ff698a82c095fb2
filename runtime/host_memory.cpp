#include "runtime/host_memory.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/units.h"

namespace trainer {

namespace {
// A number from a one-line file; 0 when absent or "max".
size_t read_number(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return 0;
  return std::strtoull(s.c_str(), nullptr, 10);
}

size_t meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// Room left under this process's cgroup limit (v2, then v1); 0: no limit.
size_t cgroup_room() {
  std::ifstream f("/proc/self/cgroup");
  std::string line, v2_path;
  while (std::getline(f, line))
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
  for (const std::string& base : {"/sys/fs/cgroup" + v2_path, std::string("/sys/fs/cgroup")}) {
    const size_t limit = read_number(base + "/memory.max");
    if (limit > 0) {
      const size_t used = read_number(base + "/memory.current");
      return limit > used ? limit - used : 1;
    }
  }
  const size_t limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (limit > 0 && limit < ((size_t)1 << 60)) {  // v1 reports a huge number for "no limit"
    const size_t used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    return limit > used ? limit - used : 1;
  }
  return 0;
}
}  // namespace

HostMemory host_memory() {
  HostMemory m;
  m.mem_available = meminfo_available();
  m.cgroup_room = cgroup_room();
  m.available = m.mem_available;
  if (m.cgroup_room > 0 && (m.available == 0 || m.cgroup_room < m.available)) m.available = m.cgroup_room;
  return m;
}

std::string HostMemory::describe() const {
  if (cgroup_room > 0 && cgroup_room < mem_available)
    return format_gb((double)cgroup_room) + " left under the cgroup memory limit (MemAvailable " +
           format_gb((double)mem_available) + ")";
  return format_gb((double)mem_available) + " MemAvailable";
}

}  // namespace trainer
