#pragma once
// The hosts a supervised run may use (supervise/allocation.h) and what the
// supervisor does with them: the health check before each launch, the
// hosts a failed launch's evidence blames (and, when none, the hosts whose
// ranks never started, found by probes), their exclusion and the spares
// that take their places, the elastic shrink to the hosts left, and the
// wait for excluded hosts to come back (readmitted when fit). What to do
// when too few are left is decide()'s (supervise/decide.h).
#include <optional>
#include <string>
#include <vector>

#include "planning/shrink.h"
#include "recipe/recipe.h"
#include "runtime/run_events.h"
#include "supervise/allocation.h"
#include "supervise/decide.h"
#include "supervise/diagnosis.h"
#include "supervise/event_log.h"
#include "supervise/launcher.h"

namespace trainer {

// What the health check before this launch blamed: the `unfit_node` event
// `trainer health` appended to events.jsonl after the supervisor's
// `health_check` event of the launch (in file order: the launch number alone
// repeats across runs of `supervise`, and times come from two hosts'
// clocks), as a diagnosis names hosts.
Diagnosis health_verdict(const std::string& run_dir, int launch);

class Fleet {
 public:
  // `ranks` ranks on the allocation's launch.nodes hosts: the full job.
  Fleet(const Recipe& r, EventLog& events, Allocation alloc, int ranks, std::string recipe_path,
        std::vector<std::string> overrides);

  Allocation& allocation() { return alloc_; }
  // The job's ranks and grid now (the smaller job's after a shrink), and
  // its --set overrides with the smaller job's data parallelism.
  int ranks() const { return shrunk_ ? shrunk_->ranks : full_ranks_; }
  const GridShape& grid() const { return shrunk_ ? shrunk_->recipe.parallel.grid : r_.parallel.grid; }
  std::vector<std::string> job_overrides(std::vector<std::string> o) const;

  // health.check: `trainer health` on every usable host (one rank each,
  // the spares too) before a launch. Its exit code, or stopped (a stop
  // signal ended it).
  struct HealthCheck {
    int code = 0;
    bool stopped = false;
  };
  HealthCheck check(int launch);
  Diagnosis check_verdict(int launch) const { return health_verdict(r_.run.dir, launch); }

  // After a failed launch that nothing else blames on a host: the hosts its
  // start marks or, when no host's ranks started, probes blame (probed: the
  // usable hosts).
  Diagnosis start_verdict(int launch, const LaunchEnd& o, const std::vector<std::string>& probed);

  // The hosts `d` blames, of those in `among`, excluded; spares take the
  // places of those among `used` (the launch's hosts). What that left, for
  // decide(); the `replace` event says so when spares came in or only
  // spares went.
  struct Exclusion {
    Outcome::Hosts hosts = Outcome::Hosts::Unchanged;
    std::vector<std::string> out, spares_in;  // excluded; taking their places
    int usable = 0;
    std::optional<Shrink> shrink;  // NoneLeft, supervisor.elastic: the largest smaller job that fits (or why none)
    std::string said;              // "host h excluded: why"
    events::HostsExcludedFields rec;  // the event's fields
  };
  Exclusion exclude(int launch, const Diagnosis& d, const std::vector<std::string>& among,
                    const std::vector<std::string>& used);
  // No spare left and decide() ends the run (why: NoSpare, ShrinkRefused): the `no_spare` event.
  void say_no_spare(int launch, const Exclusion& x, Action::Why why);
  // supervisor.elastic: the next launches run the smaller job x.shrink on the hosts left.
  void shrink(int launch, Exclusion x);
  // No spare left and supervisor.spare_wait: every spare_check_every s the
  // excluded hosts are checked; those fit again return with
  // supervisor.readmit.
  struct Wait {
    bool stopped = false, hosts_back = false;
  };
  Wait wait_for_hosts(int launch, const Exclusion& x);

 private:
  std::vector<std::string> probe_hosts(int launch, const std::vector<std::string>& hosts, const std::string& marks);
  std::vector<std::string> fit_again(int launch, double until);

  const Recipe& r_;
  EventLog& events_;
  Allocation alloc_;
  int full_ranks_, full_nodes_;  // the job as the recipe has it
  std::string recipe_path_;                // for the health checks the supervisor runs
  std::vector<std::string> overrides_;     // (the command line's --set)
  std::optional<Shrink> shrunk_;           // supervisor.elastic: the smaller job launches run now
};

}  // namespace trainer
