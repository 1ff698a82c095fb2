#pragma once
// Where `trainer supervise` runs a launch: the allocation's hosts
// (cluster/allocation.h) from the recipe or Slurm, the launcher command
// that places ranks on them, what the hosts' start marks say, and the
// hosts a health check found unfit.
#include <optional>
#include <string>
#include <vector>

#include "app/child_process.h"
#include "app/diagnosis.h"
#include "app/recipe.h"
#include "cluster/allocation.h"

namespace trainer {

// The hosts the job may run on: launch.hosts, launch.hostfile, or the Slurm
// job's nodes when launch.nodes picks from them; none (the launcher places
// the ranks, as without an allocation) when the recipe names none of these.
std::optional<Allocation> job_allocation(const Recipe& r);

// The launcher (mpirun or srun) of `ranks` ranks, on `hosts` when given (the
// same number of ranks on each), with the recipe's launch.args; the program
// and its arguments follow. overlap: srun --overlap (a relaunch, a probe).
std::vector<std::string> launcher_prefix(const Recipe& r, int ranks, const std::vector<std::string>& hosts,
                                         bool overlap);

// The launcher command (launcher_prefix) of `ranks` ranks running this
// executable's `subcommand` (train, health) on the recipe with the overrides.
// `launch`: the supervisor's launch number.
std::vector<std::string> launch_command(const Recipe& r, const char* subcommand, const std::string& recipe_path,
                                        const std::vector<std::string>& overrides, int ranks,
                                        const std::vector<std::string>& hosts, int launch);

// The environment of every process the supervisor launches for a launch:
// mpirun -x names these variables, so all are set ("" marks: none left).
Environment launch_environment(int launch, const std::string& marks);

// What a launch's start marks in `dir` say (mark_started in cmd_train: each
// host's first rank leaves a file named as its `hostname` says).
struct StartMarks {
  int marked = 0;                    // hosts that left one
  bool named = true;                 // every mark names a host of the launch...
  std::vector<std::string> missing;  // ...and these hosts left none (empty when not named)
};
StartMarks read_marks(const std::string& dir, const std::vector<std::string>& hosts);

// What the health check before this launch blamed: the `unfit_node` event
// `trainer health` appended to events.jsonl after the supervisor's
// `health_check` event of the launch (in file order: the launch number alone
// repeats across runs of `supervise`, and times come from two hosts'
// clocks), as a diagnosis names hosts.
Diagnosis health_verdict(const std::string& run_dir, int launch);

}  // namespace trainer
