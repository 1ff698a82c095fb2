#pragma once
// What `trainer calibrate` measures for a recipe on N ranks, chosen from the
// layouts plan --search would consider (layout_candidates.h): the shard
// shapes whose ops it times (one layer of each), the tensor- and
// context-parallel group sizes whose waits it measures, and the two layouts it runs real steps of
// (real_steps.h): the anchor and the layout with the most pipeline actions.
#include <vector>

#include "planning/chunk_trace.h"
#include "planning/layout_candidates.h"
#include "report/run_files.h"

namespace trainer {

struct CalibrationPlan {
  std::vector<ShardShape> shards;  // of every valid layout, each once
  std::vector<int> group_sizes;    // the tensor- and context-parallel sizes among them
  // The anchor: every rank computing, nothing pipelined or recomputed (pure
  // data parallelism in the recipe's precision, the micro-batch nearest the
  // recipe's, memory permitting); null when no such layout is valid.
  const LayoutCandidate* anchor = nullptr;
  // The layout with the most pipeline actions per step: an interleaved
  // 2-stage pipeline at micro-batch 1 over half the ranks (1F1B if the model
  // has too few layers), nothing recomputed or sharded; null when none is
  // valid or there is no anchor.
  const LayoutCandidate* many_actions = nullptr;
};

// cands: layout_candidates(base, ...), which must outlive the plan.
CalibrationPlan calibration_plan(const std::vector<LayoutCandidate>& cands, const Recipe& base, int ranks_per_node);

// A real step's time: this many steps, the median of those after the warm-up
// (0 when none was logged).
constexpr long kRealSteps = 8, kRealStepsWarmup = 2;
double real_step_ms(const RunFiles& files);

}  // namespace trainer
