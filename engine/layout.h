#pragma once
// What one rank of a recipe's layout holds: its pipeline stage's model chunks
// (layer ranges, embedding, head) and how many micro-batches each keeps in
// flight under the schedule. The training loop builds its model from it and
// `trainer plan` predicts memory from it.
#include "engine/recipe.h"
#include "model/memory_plan.h"
#include "parallel/pipeline_schedule.h"

namespace trainer {

PipelineSpec pipeline_spec(const Recipe& r);
RankLayout rank_layout(const Recipe& r, int stage);

}  // namespace trainer
