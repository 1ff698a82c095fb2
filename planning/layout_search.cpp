#include "planning/layout_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "planning/memory_fit.h"
#include "runtime/units.h"

namespace trainer {

std::string LayoutSearch::rejected(const LayoutCandidate& c) const {
  if (!c.rejected.empty()) return c.rejected;
  if (const auto m = memory.find(&c); m != memory.end()) return "memory: " + m->second;
  const auto u = unpriced.find(&c);
  return u == unpriced.end() ? "" : "profile: " + u->second;
}

double run_seconds(double steps, double step_ms) { return steps * step_ms / 1e3; }

double run_cost(double seconds, int ranks, double price_per_rank_hour) {
  return seconds / 3600 * ranks * price_per_rank_hour;
}

LayoutSearch search_layouts(const Recipe& base, const std::vector<MachineProfile>& profiles, const SearchOptions& o) {
  LayoutSearch s;
  s.candidates = layout_candidates(base, o.ranks, o.all_precisions);
  StepModels model(profiles, o.ranks_per_node);
  for (const LayoutCandidate& c : s.candidates) {
    if (!c.rejected.empty()) continue;
    const MemoryFit fit = check_job_memory(c.recipe, o.ranks_per_node, o.memory_limit_gb * 1e9);  // GB as format_gb's
    if (!fit.fits) {
      s.memory[&c] = "needs " + format_gb(fit.need) + " per rank, " + format_gb(fit.available) + " available";
      continue;
    }
    const StepPrediction p = model.predict(c.recipe);
    // A layout priced without the transfers inside its layers would rank first for nothing.
    if (!p.unpriced_transfers.empty()) {
      s.unpriced[&c] = "no " + p.unpriced_transfers.front() +
                       " figure (context parallelism's transfers): calibrate with this trainer";
      continue;
    }
    s.ranked.push_back({&c, p, fit.need});
  }
  std::stable_sort(s.ranked.begin(), s.ranked.end(), [](const RankedLayout& a, const RankedLayout& b) {
    return a.prediction.step_ms < b.prediction.step_ms;
  });
  s.tokens_per_step = base.tokens_per_step();
  s.steps = o.tokens > 0 ? std::ceil(o.tokens / s.tokens_per_step) : (double)base.training.steps;
  if (!s.ranked.empty() && s.ranked.front().prediction.save_s > 0) {
    const StepPrediction& best = s.ranked.front().prediction;
    s.advised = true;
    s.advice = checkpoint_advice(best.save_s, base.checkpoint.mtbf_hours, best.step_ms);
  }
  return s;
}

}  // namespace trainer
