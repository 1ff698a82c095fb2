#pragma once
// The rules between a recipe's keys (names, the layout against the world
// size, divisibility, min_lr <= lr, ...), on the typed Recipe: the reader
// applies them to a file (app/recipe.cpp) and `plan --search` to each layout
// it tries (planning/layout_candidates.cpp), so both refuse the same layouts with
// the same words. The range of each key alone is the key table's
// (recipe/recipe_keys.h); the data files' existence is the reader's.
#include <string>
#include <vector>

#include "recipe/recipe.h"

namespace trainer {

struct RecipeProblem {
  std::string section, key;  // the key blamed: one the user set where several are involved
  std::string message;       // "where: [section] key: why" (where: Recipe::origin)
  bool warning = false;      // legal but likely unintended
};

// Warnings, then at most one error (the first, in the order a reader would
// fix them; later rules may assume it holds). world_size: the job's ranks
// (0: no job yet, the layout is not checked against it).
std::vector<RecipeProblem> check_recipe(const Recipe& r, int world_size);

}  // namespace trainer
