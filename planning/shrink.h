#pragma once
// A supervised job on fewer nodes (supervisor.elastic; `trainer plan
// --nodes N`): the same ranks per node on fewer nodes means fewer
// data-parallel replicas (the other dimensions stay as they are) and, for the same
// global batch, more micro-batches per replica: the same samples in the same
// order, resumed through the resharding load. Refused, with the reason,
// when the ranks left do not make whole replicas, the global batch does not
// divide among them, a recipe rule fails, or the memory pre-flight says a
// rank would not fit (each replica's ZeRO-1 share grows).
#include <string>

#include "recipe/recipe.h"

namespace trainer {

struct Shrink {
  bool ok = false;
  int nodes = 0, ranks = 0;  // of the smaller job
  Recipe recipe;             // its recipe: parallel.dp, launch.nodes (and launch.ranks when set) for the ranks left
  std::string why;           // when not ok: what stops it
};

// `r` runs `ranks` ranks on `full_nodes` nodes; the job on `nodes` of them.
// memory: also run the memory pre-flight (planning/memory_fit.h,
// check_job_memory) against this machine's memory shared by a node's ranks,
// or, per_rank_bytes > 0, against that much per rank.
Shrink shrink_job(const Recipe& r, int ranks, int full_nodes, int nodes, bool memory, double per_rank_bytes = 0);

}  // namespace trainer
