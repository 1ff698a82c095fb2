#pragma once
// What calibrate's real steps set in a machine profile. The anchor: a few
// steps of a data-parallel layout against the model's price for it (its
// factor scales every step time). The cost of a pipeline action beyond its
// ops (MachineProfile::action_ms): from steps of the layout with many
// actions per step (an interleaved pipeline at micro-batch 1), the cost that
// makes the model, the anchor's factor re-taken with it, meet them.
#include <string>

#include "recipe/recipe.h"
#include "planning/machine_profile.h"

namespace trainer {

// Records the anchor `layout` (its recipe `r`, a real step of measured_ms)
// with the model's price for it without any anchor.
void set_anchor(MachineProfile& p, int ranks_per_node, const Recipe& r, const std::string& layout, double measured_ms);

// Sets p.action_ms (never below 0) and p.anchor_predicted_ms with it.
void solve_action_cost(MachineProfile& p, int ranks_per_node, const Recipe& anchor, const Recipe& many_actions,
                       double measured_ms);

}  // namespace trainer
