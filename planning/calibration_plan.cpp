#include "planning/calibration_plan.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "planning/memory_fit.h"
#include "runtime/metrics.h"
#include "runtime/metrics_fields.h"

namespace trainer {

namespace {

// A layout calibrate may run real steps of: valid, no layer split over ranks
// (kLayerSplitDims), nothing recomputed or sharded, the recipe's
// precision, fitting memory.
bool plain(const LayoutCandidate& c, const Recipe& base, int per_node) {
  const Recipe& r = c.recipe;
  return c.rejected.empty() && r.parallel.grid.size_of(kLayerSplitDims) == 1 &&
         r.recompute.mode == RecomputeMode::None &&
         r.parallel.zero_stage == 0 && r.training.precision == base.training.precision &&
         check_memory_fit(r, -1, true, per_node).fits;
}

}  // namespace

CalibrationPlan calibration_plan(const std::vector<LayoutCandidate>& cands, const Recipe& base, int per_node) {
  CalibrationPlan plan;
  std::set<ShardShape> seen;
  for (const LayoutCandidate& c : cands) {
    if (!c.rejected.empty()) continue;
    const Recipe& r = c.recipe;
    ShardShape s = shard_shape_of(r);
    s.recompute = {};  // the same ops, recomputed or not
    if (!seen.insert(s).second) continue;
    plan.shards.push_back(s);
    for (const GridDim& d : kGridDims)
      if (const int g = r.parallel.grid.*d.size; kLayerSplitDims & grid_dim(d.name) && g > 1 && std::find(plan.group_sizes.begin(), plan.group_sizes.end(), g) == plan.group_sizes.end())
        plan.group_sizes.push_back(g);
  }
  auto distance = [&](const LayoutCandidate* c) { return std::abs(c->recipe.training.micro_batch - base.training.micro_batch); };
  for (const LayoutCandidate& c : cands)
    if (plain(c, base, per_node) && c.recipe.parallel.grid.pp == 1 && (!plan.anchor || distance(&c) < distance(plan.anchor)))
      plan.anchor = &c;
  if (!plan.anchor) return plan;
  for (const LayoutCandidate& c : cands)
    if (plain(c, base, per_node) && c.recipe.parallel.grid.pp == 2 && c.recipe.training.micro_batch == 1 &&
        (!plan.many_actions || c.recipe.parallel.virtual_stages > plan.many_actions->recipe.parallel.virtual_stages))
      plan.many_actions = &c;
  return plan;
}

double real_step_ms(const RunFiles& files) {
  std::vector<double> ms;
  for (const nlohmann::json* rec : files.steps_after(kRealStepsWarmup))
    if (const double x = number(*rec, metrics_field::kStepMs); !std::isnan(x)) ms.push_back(x);
  return ms.empty() ? 0 : median_of(ms);
}

}  // namespace trainer
