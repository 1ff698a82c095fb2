#pragma once
// How `trainer supervise` launches: the launcher command (mpirun or srun)
// that places ranks on the allocation's hosts, the environment every launch
// gets, and what the hosts' start marks say.
#include <string>
#include <vector>

#include "recipe/recipe.h"
#include "supervise/child_process.h"

namespace trainer {

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

}  // namespace trainer
