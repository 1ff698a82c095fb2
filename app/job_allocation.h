#pragma once
// Where `trainer supervise` may run the job: the allocation's hosts from the
// recipe's [launch] hosts or hostfile, or from Slurm's SLURM_JOB_NODELIST
// (the environment is app/'s to read).
#include <optional>

#include "recipe/recipe.h"
#include "supervise/allocation.h"

namespace trainer {

// launch.hosts, launch.hostfile, or the Slurm job's nodes when launch.nodes
// picks from them; none (the launcher places the ranks, as without an
// allocation) when the recipe names none of these.
std::optional<Allocation> job_allocation(const Recipe& r);

}  // namespace trainer
