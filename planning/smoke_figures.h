#pragma once
// `trainer smoke`'s numbers: the figures of its steps from the scratch run's
// metrics.jsonl against the memory plan and the cost model, the projection
// of the full run, and --check-restart's comparison. app/smoke_report.cpp
// prints them.
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "planning/machine_profile.h"
#include "recipe/recipe.h"

namespace trainer {

// "dp=2 pp=2 tp=2 (sequence parallel) 1f1b, micro-batch 2, recompute none, zero 0, fp32":
// the run header's layout (Recipe::layout_summary) and what else a step depends on.
std::string layout_text(const Recipe& r);

// The parts of a measured step, declared once in the order smoke prints
// them: the key under "parts_ms" (smoke --json) and the words of smoke's line.
struct MeasuredPart {
  const char* key;
  const char* words;
  // Its median over the measured steps' records (metrics.jsonl).
  double (*median)(const std::vector<const nlohmann::json*>& steps);
};
std::span<const MeasuredPart> measured_parts();

struct SmokeRun {
  std::string recipe;          // the recipe file, as given
  std::string run_dir, data;   // data: "recipe" or "synthetic"
  int warmup = 0, ranks_per_node = 1;
  std::vector<MachineProfile> profiles;  // none: no prediction
  std::string profile_names;             // as given (--profile)
  double price_per_rank_hour = -1;       // < 0: no cost
};

// r: the recipe the steps ran (the scratch run's resolved one); user: the
// recipe as the user will run it (its training.steps for the projection).
nlohmann::json smoke_figures(const SmokeRun& run, const Recipe& r, const Recipe& user);

// --check-restart: adds j["restart"], the steps after `saved_at` of the
// restarted run against the uninterrupted one (loss and gradient norm,
// exactly) and the save's size, blocking time and MB/s; and, from that
// measured save, j["checkpoint"], the automatic checkpoint interval.
void add_restart(nlohmann::json& j, const std::string& straight_dir, const std::string& restart_dir,
                 const std::string& ckpt_dir, long saved_at, double mtbf_hours);

}  // namespace trainer
