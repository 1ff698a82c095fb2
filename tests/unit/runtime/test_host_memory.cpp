// The memory pre-flight's cgroup room (runtime/host_memory.h) on cgroup
// trees made up here, the answers worked out by hand: the least room over
// the process's cgroup and its ancestors, v2 first, else v1's memory
// controller (this machine kind runs under v1, its limit one level up).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/host_memory.h"

using namespace trainer;
namespace fs = std::filesystem;

namespace {
void put(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text << "\n";
}
struct Tree {
  fs::path root;
  Tree() {
    char tmpl[] = "/tmp/trainer_cgroups_XXXXXX";
    root = mkdtemp(tmpl);
  }
  ~Tree() { fs::remove_all(root); }
};
}  // namespace

TEST(CgroupRoom, V1TheLimitOfAnAncestorBindsAProcessBelowIt) {
  Tree t;
  const fs::path m = t.root / "memory";
  put(m / "memory.limit_in_bytes", "9223372036854771712");  // "no limit" in v1
  put(m / "memory.usage_in_bytes", "5000000");
  put(m / "jobs/memory.limit_in_bytes", "1000");
  put(m / "jobs/memory.usage_in_bytes", "300");
  put(m / "jobs/task7/memory.limit_in_bytes", "9223372036854771712");
  put(m / "jobs/task7/memory.usage_in_bytes", "100");
  const std::string self = "5:devices:/\n4:memory:/jobs/task7\n1:cpu,cpuacct:/\n0::/\n";
  EXPECT_EQ(cgroup_room_at(self, t.root.string()), 700u);
  put(m / "jobs/task7/memory.limit_in_bytes", "500");  // tighter below: 500 - 100
  EXPECT_EQ(cgroup_room_at(self, t.root.string()), 400u);
  EXPECT_EQ(cgroup_room_at("4:memory:/\n0::/\n", t.root.string()), 0u) << "the root sets no limit";
}

TEST(CgroupRoom, V2TheLeastRoomOverTheAncestorsAndNoneWithoutALimit) {
  Tree t;
  put(t.root / "x/memory.max", "3000");
  put(t.root / "x/memory.current", "2500");
  put(t.root / "x/y/memory.max", "5000");
  put(t.root / "x/y/memory.current", "1000");
  put(t.root / "x/y/z/memory.max", "max");
  put(t.root / "x/y/z/memory.current", "10");
  EXPECT_EQ(cgroup_room_at("0::/x/y/z\n", t.root.string()), 500u);
  EXPECT_EQ(cgroup_room_at("0::/\n", t.root.string()), 0u);
  put(t.root / "x/memory.current", "4000");  // over its limit: no room, said as 1 byte
  EXPECT_EQ(cgroup_room_at("0::/x/y/z\n", t.root.string()), 1u);
  EXPECT_EQ(cgroup_room_at("", t.root.string()), 0u);
}
