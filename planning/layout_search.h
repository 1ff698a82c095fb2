#pragma once
// `trainer plan --search`'s numbers: every layout of N ranks
// (layout_candidates.h), fitted to memory (memory_fit.h) and priced by the
// cost model (step_model.h), ranked by predicted step time; the run's steps
// and what the best layout's checkpoints cost. app/plan_search.cpp prints it.
#include <map>
#include <string>
#include <vector>

#include "planning/layout_candidates.h"
#include "planning/machine_profile.h"
#include "planning/step_model.h"

namespace trainer {

struct SearchOptions {
  int ranks = 1, ranks_per_node = 1;
  bool all_precisions = false;
  double memory_limit_gb = 0;  // > 0: a rank's memory instead of its share of this node's
  double tokens = 0;           // > 0: the run's length in tokens instead of training.steps
};

struct RankedLayout {
  const LayoutCandidate* candidate;
  StepPrediction prediction;
  double memory = 0;  // bytes, the rank that needs most
};

struct LayoutSearch {
  std::vector<LayoutCandidate> candidates;
  std::vector<RankedLayout> ranked;                      // fastest first
  std::map<const LayoutCandidate*, std::string> memory;  // valid but short of memory: why
  std::map<const LayoutCandidate*, std::string> unpriced;  // context parallelism the profiles have no figures for
  double tokens_per_step = 0, steps = 0;                 // the run priced
  bool advised = false;                                  // the best layout has a save time:
  CheckpointAdvice advice;                               // its automatic checkpoint interval
  // Why a layout was left out ("" if ranked): a recipe rule, "memory: ..."
  // or "profile: ...".
  std::string rejected(const LayoutCandidate& c) const;
};

// base: the recipe read once with no world size (layout_candidates.h).
LayoutSearch search_layouts(const Recipe& base, const std::vector<MachineProfile>& profiles, const SearchOptions& o);

// A layout's wall time for `steps` steps and, with a price per rank-hour, its cost.
double run_seconds(double steps, double step_ms);
double run_cost(double seconds, int ranks, double price_per_rank_hour);

}  // namespace trainer
