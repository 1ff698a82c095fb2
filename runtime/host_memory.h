#pragma once
// How much memory this process may use: the kernel's MemAvailable, capped by
// the cgroup limits over it (v2 memory.max, or v1 limit_in_bytes; its own
// cgroup's and its ancestors') less what each cgroup already uses. Before a run allocates, the trainer compares its predicted
// need with its share of this (the memory pre-flight in planning/memory_fit.h).
#include <cstddef>
#include <string>

namespace trainer {

struct HostMemory {
  size_t available = 0;     // bytes this process could still get (min of the two below)
  size_t mem_available = 0; // /proc/meminfo MemAvailable
  size_t cgroup_room = 0;   // cgroup limit - usage; 0: no limit found
  std::string describe() const;  // "7.2 GB MemAvailable" (+ "cgroup limit: 4.0 GB free of it")
};

HostMemory host_memory();

// The least room under the memory limits of a process's cgroup and of each
// cgroup above it (a parent's limit binds its children too), from the text
// of /proc/self/cgroup and the cgroup file systems' mount point: v2 there,
// else v1's memory controller under ROOT/memory. 0: no limit.
// host_memory() asks it of the real ones.
size_t cgroup_room_at(const std::string& proc_cgroup, const std::string& root);

}  // namespace trainer
