#pragma once
// The cost of a pipeline action beyond its ops (MachineProfile::action_ms),
// from real steps of two layouts: the anchor (few actions; its factor scales
// every step) and one with many actions per step (an interleaved pipeline
// at micro-batch 1). The cost is what makes the model, the anchor's factor
// re-taken with it, meet the second layout's measured step.
#include "engine/recipe.h"
#include "planning/machine_profile.h"

namespace trainer {

// Sets p.action_ms (never below 0) and p.anchor_predicted_ms with it.
void solve_action_cost(MachineProfile& p, int ranks_per_node, const Recipe& anchor, const Recipe& many_actions,
                       double measured_ms);

}  // namespace trainer
