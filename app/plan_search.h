#pragma once
// `trainer plan --search` (app/plan_search.cpp): the layouts of `ranks`
// ranks ranked by predicted step time, with memory, tokens/s, MFU, the
// run's wall time and cost, and why the others were rejected.
#include "app/recipe_args.h"

namespace trainer {

// --memory-per-rank-gb's ceiling (plan, plan --nodes, plan --search): more
// than any node holds; leaving the option out means this machine's memory.
constexpr double kMaxMemoryPerRankGb = 1e6;

int plan_search(const RecipeArgs& args, int ranks);

}  // namespace trainer
