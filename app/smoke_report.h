#pragma once
// What `trainer smoke` tells (app/cmd_smoke.cpp): the figures of its steps
// from the scratch run's metrics.jsonl against the memory plan and the cost
// model, the projection of the full run, and the verdict of --min-mfu and
// --baseline.
#include <nlohmann/json.hpp>
#include <string>

#include "app/recipe.h"
#include "app/recipe_args.h"

namespace trainer {

// "dp 2 x tp 2 (sp) x pp 2 1f1b, micro-batch 2, recompute none, zero 0, fp32"
std::string layout_text(const Recipe& r);

// r: the recipe the steps ran (the scratch run's resolved one); user: the
// recipe as the user will run it (its training.steps for the projection);
// ranks_per_node: how the job's ranks share nodes (the cost model's input).
struct SmokeRun {
  std::string run_dir, data;  // data: "recipe" or "synthetic"
  int warmup = 0, ranks_per_node = 1;
};
nlohmann::json smoke_figures(const RecipeArgs& args, const SmokeRun& run, const Recipe& r, const Recipe& user);

// --check-restart: the steps after `saved_at` of the restarted run against
// the uninterrupted one (loss and gradient norm, exactly), and the save's
// size, blocking time and MB/s.
nlohmann::json compare_restart(const std::string& straight_dir, const std::string& restart_dir,
                               const std::string& ckpt_dir, long saved_at);

// The automatic checkpoint interval for a save time, and what it costs.
nlohmann::json advice_json(double save_s, const std::string& source, double mtbf_hours, double step_ms);

// Prints the report, writes --json, returns 0 or kExitSmokeShortfall.
int report_smoke(const RecipeArgs& args, nlohmann::json& j);

}  // namespace trainer
