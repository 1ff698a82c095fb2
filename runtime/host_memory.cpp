#include "runtime/host_memory.h"

#include <cstdio>
#include <fstream>
#include <sstream>
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

// Room left under one cgroup's limit; 0 when it sets none.
size_t room_in(const std::string& dir, const char* limit_file, const char* usage_file) {
  const size_t limit = read_number(dir + "/" + limit_file);
  if (limit == 0 || limit >= ((size_t)1 << 60)) return 0;  // none ("max"; v1 says a huge number)
  const size_t used = read_number(dir + "/" + usage_file);
  return limit > used ? limit - used : 1;
}

// The least room under the limits of `path` (as /proc/self/cgroup names it)
// and its ancestors, in the hierarchy mounted at `mount`; 0: no limit.
size_t least_room(const std::string& mount, std::string path, const char* limit_file, const char* usage_file) {
  size_t least = 0;
  for (;;) {
    const size_t room = room_in(mount + (path == "/" ? "" : path), limit_file, usage_file);
    if (room > 0 && (least == 0 || room < least)) least = room;
    if (path.empty() || path == "/") return least;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

}  // namespace

size_t cgroup_room_at(const std::string& proc_cgroup, const std::string& root) {
  std::istringstream f(proc_cgroup);
  std::string line, v2_path, v1_path;
  bool v2 = false, v1 = false;
  while (std::getline(f, line)) {
    if (line.rfind("0::", 0) == 0) v2 = true, v2_path = line.substr(3);
    const size_t c = line.find(':'), c2 = c == std::string::npos ? c : line.find(':', c + 1);
    if (c2 != std::string::npos) {
      const std::string controllers = "," + line.substr(c + 1, c2 - c - 1) + ",";
      if (controllers.find(",memory,") != std::string::npos) v1 = true, v1_path = line.substr(c2 + 1);
    }
  }
  if (v2)
    if (const size_t room = least_room(root, v2_path, "memory.max", "memory.current")) return room;
  if (v1) return least_room(root + "/memory", v1_path, "memory.limit_in_bytes", "memory.usage_in_bytes");
  return 0;
}

namespace {
size_t cgroup_room() {
  std::ifstream f("/proc/self/cgroup");
  std::stringstream text;
  text << f.rdbuf();
  return cgroup_room_at(text.str(), "/sys/fs/cgroup");
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
