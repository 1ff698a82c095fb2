// The allocation `trainer supervise` launches on (supervise/allocation.h):
// Slurm host lists against `scontrol show hostnames` (the reference, where
// Slurm is installed) and against Slurm's documented examples; hostfiles; a
// launch's hosts all or none, spares taking excluded hosts' places.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "supervise/allocation.h"
#include "runtime/host_name.h"
#include "tests/support/temp_dir.h"

namespace trainer {
namespace {

using Hosts = std::vector<std::string>;

TEST(HostList, SlurmsDocumentedForms) {
  EXPECT_EQ(expand_hostlist("tux[1-3]"), (Hosts{"tux1", "tux2", "tux3"}));
  EXPECT_EQ(expand_hostlist("node[01-03,7],gpu-a[1-2]"), (Hosts{"node01", "node02", "node03", "node7", "gpu-a1", "gpu-a2"}));
  EXPECT_EQ(expand_hostlist("x[009-011]"), (Hosts{"x009", "x010", "x011"}));
  EXPECT_EQ(expand_hostlist("rack[1-2]n[3-4]"), (Hosts{"rack1n3", "rack1n4", "rack2n3", "rack2n4"}));
  EXPECT_EQ(expand_hostlist("solo"), (Hosts{"solo"}));
  EXPECT_EQ(expand_hostlist("a,b[2],c"), (Hosts{"a", "b2", "c"}));
  for (const char* bad : {"", "a,,b", "n[1-", "n1-2]", "n[3-1]", "n[a-b]", "n[[1]]", "a b"})
    EXPECT_THROW(expand_hostlist(bad), std::invalid_argument) << bad;
}

// The same lists through Slurm's own parser.
TEST(HostList, AsScontrolShowHostnamesPrintsThem) {
  if (std::system("command -v scontrol >/dev/null 2>&1") != 0) GTEST_SKIP() << "scontrol is not installed";
  const std::string dir = temp_dir("hostlist");
  std::ofstream(dir + "/slurm.conf") << "ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n";
  for (const char* list : {"tux[1-3]", "node[01-03,7],gpu-a[1-2]", "x[009-011],y", "rack[1-2]n[3-4]",
                           "c[0998-1001]", "a[1,3,5-6]"}) {
    FILE* p = popen(("SLURM_CONF=" + dir + "/slurm.conf scontrol show hostnames '" + list + "' 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ASSERT_EQ(pclose(p), 0) << out;
    Hosts want;
    std::stringstream lines(out);
    for (std::string l; std::getline(lines, l);) want.push_back(l);
    EXPECT_EQ(expand_hostlist(list), want) << list;
  }
}

TEST(HostList, HostfileNamesEachHostOnce) {
  EXPECT_EQ(parse_hostfile("# the racks\nnode1 slots=4\n\nnode2 slots=4 max_slots=8  # a comment\nnode1\n"),
            (Hosts{"node1", "node2"}));
  EXPECT_THROW(parse_hostfile("node1 slots=4\nnode2 4\n"), std::invalid_argument);
}

TEST(Allocation, ALaunchTakesTheFirstHostsAndSparesReplaceExcludedOnes) {
  Allocation a({"n1", "n2", "n3", "n4"}, 2);
  EXPECT_EQ(a.launch_hosts(), (Hosts{"n1", "n2"}));
  EXPECT_EQ(a.spares(), (Hosts{"n3", "n4"}));
  EXPECT_TRUE(a.exclude("n2", "link down"));
  EXPECT_FALSE(a.exclude("n2", "again"));
  EXPECT_FALSE(a.exclude("n9", "not ours"));
  EXPECT_EQ(a.launch_hosts(), (Hosts{"n1", "n3"}));  // allocation order: the spare takes the place
  EXPECT_EQ(a.spares(), (Hosts{"n4"}));
  EXPECT_EQ(a.excluded().at("n2"), "link down");
  EXPECT_TRUE(a.exclude("n1", "crash"));
  EXPECT_EQ(a.launch_hosts(), (Hosts{"n3", "n4"}));
  EXPECT_TRUE(a.spares().empty());
  EXPECT_TRUE(a.exclude("n4", "crash"));
  EXPECT_TRUE(a.launch_hosts().empty()) << "never a partial job";
  EXPECT_EQ(a.spares(), (Hosts{"n3"}));  // what is left, too little for a launch
  EXPECT_TRUE(a.readmit("n4"));  // supervisor.readmit: passes the health check again
  EXPECT_FALSE(a.readmit("n4"));
  EXPECT_EQ(a.launch_hosts(), (Hosts{"n3", "n4"}));
  EXPECT_TRUE(a.exclude("n4", "again"));
  a.shrink(1);  // supervisor.elastic: the job goes on on what is left
  EXPECT_EQ(a.nodes(), 1);
  EXPECT_EQ(a.launch_hosts(), (Hosts{"n3"}));
  EXPECT_TRUE(a.spares().empty());
  EXPECT_THROW(a.shrink(2), std::invalid_argument);  // never larger
  EXPECT_THROW(a.shrink(0), std::invalid_argument);
}

TEST(Allocation, EveryHostWithoutNodesAndRefusalsOfWhatCannotBe) {
  Allocation all({"a", "b"}, 0);
  EXPECT_EQ(all.nodes(), 2);
  EXPECT_EQ(all.launch_hosts(), (Hosts{"a", "b"}));
  EXPECT_THROW(Allocation({"a", "b"}, 3), std::invalid_argument);
  EXPECT_THROW(Allocation({"a", "b", "a"}, 2), std::invalid_argument);
  // One host name each, as the launcher reads them (issue 66).
  for (const char* bad : {"a,b", "a:2", "-np", "", "a b", "a/b", ".x", "a;b"})
    EXPECT_THROW(Allocation({"n1", bad}, 0), std::invalid_argument) << bad;
  EXPECT_NO_THROW(Allocation({"node-01.cluster_a", "10.0.0.2"}, 0));
  // A range bound too long for any host number: refused as malformed, not std::out_of_range.
  EXPECT_THROW(expand_hostlist("n[1-99999999999999999999]"), std::invalid_argument);
}

TEST(Allocation, FindsTheHostARankNamesByItsShortName) {
  Allocation a({"node7", "node8"}, 1);
  EXPECT_EQ(a.find("node8"), "node8");
  EXPECT_EQ(a.find("node8.cluster.local"), "node8");
  EXPECT_EQ(a.find("node9"), "");
  EXPECT_TRUE(same_host("node8.x", "node8"));
  EXPECT_FALSE(same_host("node8", "node80"));
  // Two qualified names, or addresses, are the same host only when equal.
  EXPECT_FALSE(same_host("node8.x", "node8.y"));
  EXPECT_FALSE(same_host("10.0.0.1", "10.0.0.2"));
  EXPECT_FALSE(same_host("10", "10.0.0.2"));
  EXPECT_FALSE(same_host("fe80::1", "fe80::2"));
  EXPECT_TRUE(same_host("10.0.0.2", "10.0.0.2"));
  Allocation ips({"10.0.0.1", "10.0.0.2"}, 1);
  EXPECT_EQ(ips.find("10.0.0.2"), "10.0.0.2");
  EXPECT_EQ(ips.find("10.0.0.3"), "");
}

}  // namespace
}  // namespace trainer
