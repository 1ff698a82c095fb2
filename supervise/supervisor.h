#pragma once
// `trainer supervise`'s loop: launch the job (supervise/launcher.h), read
// what its ranks left (supervise/diagnosis.h), let decide() say what comes
// next (supervise/decide.h), and carry that out: exclude hosts and take
// spares (supervise/fleet.h), swap stragglers (supervise/straggler_policy.h),
// shrink, wait for hosts, restart after the backoff, or end with an exit
// code. Every step is said in <run.dir>/events.jsonl and on the console.
#include <optional>
#include <string>
#include <vector>

#include "recipe/recipe.h"
#include "supervise/allocation.h"

namespace trainer {

struct SuperviseJob {
  std::string recipe_path;             // what each launch trains (and the health checks read)
  std::vector<std::string> overrides;  // the command line's --set
  std::vector<std::string> command;    // a launch command given after `--` (instead of the recipe's)
};

// Runs the job under supervision until it is done, given up or stopped;
// returns the supervisor's exit code (supervise/decide.h).
int supervise(const Recipe& r, const SuperviseJob& job, std::optional<Allocation> alloc);

}  // namespace trainer
