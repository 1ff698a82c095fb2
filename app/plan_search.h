#pragma once
// `trainer plan --search` (app/plan_search.cpp): the layouts of `ranks`
// ranks ranked by predicted step time, with memory, tokens/s, MFU, the
// run's wall time and cost, and why the others were rejected.
#include "app/recipe_args.h"

namespace trainer {

int plan_search(const RecipeArgs& args, int ranks);

}  // namespace trainer
