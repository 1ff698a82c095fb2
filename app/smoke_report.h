#pragma once
// What `trainer smoke` prints (app/cmd_smoke.cpp): the figures of
// planning/smoke_figures.h as a report, --json, and the verdict of --min-mfu
// and --baseline.
#include <nlohmann/json.hpp>

#include "app/recipe_args.h"

namespace trainer {

// Prints the report, writes --json, returns 0 or kExitSmokeShortfall.
int report_smoke(const RecipeArgs& args, nlohmann::json& j);

}  // namespace trainer
