#pragma once
// The nodes a supervised job may run on, and which of them run each launch.
// The allocation is the hosts the scheduler gave (Slurm's
// SLURM_JOB_NODELIST) or the recipe lists (launch.hosts, launch.hostfile);
// a launch runs on launch.nodes of them, the first ones not excluded, all at
// once or not at all, and the rest wait as spares. A host the supervisor
// blames for a failure (supervise/diagnosis.h) is excluded for the rest of the run,
// and the first spare takes its place.
#include <map>
#include <string>
#include <vector>

namespace trainer {

// Slurm's compressed host list ("node[01-03,7],gpu[1-2]") as host names, in
// order, as `scontrol show hostnames` prints them (ranges keep their zero
// padding; several bracket groups in one name multiply out). Throws
// std::invalid_argument naming what is malformed.
std::vector<std::string> expand_hostlist(const std::string& list);

// The host names of an Open MPI hostfile ("name [slots=N ...]", '#' starts a
// comment), in order, each once. Throws std::invalid_argument naming the line.
std::vector<std::string> parse_hostfile(const std::string& text);

class Allocation {
 public:
  // hosts: in order of preference, each once; nodes: how many a launch runs
  // on (0: every host). Throws std::invalid_argument when nodes is more
  // than there are hosts, or a host is listed twice.
  Allocation(std::vector<std::string> hosts, int nodes);

  const std::vector<std::string>& hosts() const { return hosts_; }
  int nodes() const { return nodes_; }
  // The hosts the next launch runs on: the first nodes() not excluded, in
  // allocation order; empty when fewer than that are left (never a part).
  std::vector<std::string> launch_hosts() const;
  // The hosts left to replace a failed one: neither excluded nor in
  // launch_hosts() (all that are not excluded when too few are left for a launch).
  std::vector<std::string> spares() const;
  // Every host not excluded: the launch's, then the spares (the hosts a
  // health check or a start probe measures).
  std::vector<std::string> usable() const;
  // Excludes the allocation's host for the rest of the run, with why; false
  // for a name that is not one of its hosts or is excluded already.
  bool exclude(const std::string& host, const std::string& why);
  const std::map<std::string, std::string>& excluded() const { return excluded_; }
  // An excluded host back in the allocation (supervisor.readmit); false
  // when it is not excluded.
  bool readmit(const std::string& host) { return excluded_.erase(host) > 0; }
  // Launches from now on run on `nodes` hosts (supervisor.elastic, when no
  // spare is left); throws std::invalid_argument outside 1..nodes().
  void shrink(int nodes);
  // The allocation's host that a name a rank reports (gethostname) is, or "".
  std::string find(const std::string& name) const;

 private:
  std::vector<std::string> hosts_;
  int nodes_;
  std::map<std::string, std::string> excluded_;  // host -> why
};

}  // namespace trainer
