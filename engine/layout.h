#pragma once
// What one rank of a recipe's layout holds: its pipeline stage's model chunks
// (layer ranges, embedding, head) and how many micro-batches each keeps in
// flight under the schedule. The training loop builds its model from it and
// `trainer plan` predicts memory from it.
#include "recipe/recipe.h"
#include "model/memory_plan.h"
#include "parallel/pipeline_schedule.h"
#include "runtime/backend.h"

namespace trainer {

RankLayout rank_layout(const Recipe& r, int stage);
// The same but for its chunks (the part every stage shares).
RankLayout layout_sizes(const Recipe& r);

// The backend a rank of this recipe computes on, with `ranks_on_node` ranks
// sharing its node's devices and `local_rank` its index among them (the
// launcher's; -1: a single process): runtime.backend, threads and the CUDA
// options.
BackendOptions backend_options(const Recipe& r, int ranks_on_node, int local_rank);

}  // namespace trainer
