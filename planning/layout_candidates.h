#pragma once
// The layouts `trainer plan --search` and `trainer calibrate` consider for a
// recipe on N ranks: every split into data, tensor and pipeline parallel
// sizes, with sequence parallelism on and off, both pipeline schedules
// (interleaved with 2 virtual stages), micro-batch sizes, the three
// recompute modes and ZeRO stages 0 and 1; precision stays the recipe's (it
// changes the numbers, not only the speed) unless all_precisions asks for
// fp32 and bf16 both. Each is the recipe read once, copied and edited as its
// --set lines would edit the file, its defaults derived again and checked
// by the same rules as `trainer train` (recipe/recipe_rules.h); one that
// fails says why.
#include <string>
#include <vector>

#include "recipe/recipe.h"

namespace trainer {

struct LayoutCandidate {
  std::vector<std::string> sets;  // "parallel.tp=2", ...: the --set lines that make it
  std::string label;              // "dp 2 tp 2 sp pp 2 1f1b mb 2 none zero 0"
  std::string rejected;           // empty: valid; else why not
  Recipe recipe;                  // valid ones
};

// base: the recipe as loaded with no world size (load_recipe(path, overrides, 0, false)).
std::vector<LayoutCandidate> layout_candidates(const Recipe& base, int ranks, bool all_precisions = false);

}  // namespace trainer
