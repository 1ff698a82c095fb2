#include "planning/shrink.h"

#include "planning/memory_fit.h"
#include "recipe/recipe_rules.h"

namespace trainer {

Shrink shrink_job(const Recipe& r, int ranks, int full_nodes, int nodes, bool memory, double per_rank_bytes) {
  Shrink s;
  s.nodes = nodes;
  const int per_node = full_nodes > 0 ? ranks / full_nodes : ranks;
  s.ranks = nodes * per_node;
  const GridShape& g = r.parallel.grid;
  const int model_ranks = (int)g.model_ranks();
  const std::string held = std::to_string(nodes) + " node(s) of " + std::to_string(per_node) + " rank(s) hold " +
                           std::to_string(s.ranks) + " rank(s)";
  if (nodes < 1 || full_nodes < 1 || nodes > full_nodes) {
    s.why = "no job on " + std::to_string(nodes) + " of " + std::to_string(full_nodes) + " node(s)";
    return s;
  }
  if (s.ranks < model_ranks || s.ranks % model_ranks != 0) {
    s.why = held + ", not a multiple of one replica's " + grid_names(kModelDims, " x ") + " = " + std::to_string(model_ranks);
    return s;
  }
  s.recipe = r;
  s.recipe.parallel.grid.dp = s.ranks / model_ranks;
  s.recipe.launch.nodes = nodes;  // the job's own rules check its ranks against them
  if (r.launch.ranks > 0) s.recipe.launch.ranks = s.ranks;
  for (const RecipeProblem& p : check_recipe(s.recipe, s.ranks))
    if (!p.warning) {
      s.why = held + " at dp " + std::to_string(s.recipe.parallel.grid.dp) + ": " + p.message;
      return s;
    }
  if (memory) {
    const MemoryFit fit = check_job_memory(s.recipe, per_node, per_rank_bytes);
    if (!fit.fits) {
      s.why = held + " at dp " + std::to_string(s.recipe.parallel.grid.dp) + ": " + fit.message;
      return s;
    }
  }
  s.ok = true;
  return s;
}

}  // namespace trainer
