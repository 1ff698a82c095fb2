// `trainer plan RECIPE --ranks N --search --profile FILE`: reads the options,
// has planning/layout_search.h rank the layouts, prints the table, the
// rejections and --json.
#include "app/plan_search.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "app/recipe.h"
#include "planning/layout_search.h"
#include "runtime/errors.h"
#include "runtime/units.h"

namespace trainer {

namespace {

void print_table(const std::vector<RankedLayout>& ranked, size_t top, double steps, int ranks, double price) {
  std::string parts;
  for (const PredictionPart& part : kPredictionParts)
    if (part.column) parts += (parts.empty() ? "" : " "), parts += part.column;
  std::printf("%-4s %-56s %9s %9s %10s %6s  %s, ms | run time, cost\n", "#", "layout", "MB/rank", "step ms", "tokens/s",
              "MFU", parts.c_str());
  for (size_t i = 0; i < std::min(top, ranked.size()); i++) {
    const RankedLayout& x = ranked[i];
    const StepPrediction& p = x.prediction;
    const double seconds = run_seconds(steps, p.step_ms);
    char cost[48] = "";
    if (price > 0) std::snprintf(cost, sizeof cost, ", $%.2f", run_cost(seconds, ranks, price));
    std::string figures;
    for (const PredictionPart& part : kPredictionParts) {
      if (!part.column) continue;
      char b[64];
      const double v = part.clamped ? std::max(0.0, p.*part.ms) : p.*part.ms;
      std::snprintf(b, sizeof b, part.column[0] == '(' ? "(%.0f)" : "%.0f", v);
      figures += (figures.empty() ? "" : " "), figures += b;
    }
    std::printf("%-4zu %-56s %9.1f %9.1f %10.0f %5.1f%%  %s | %s%s\n", i + 1, x.candidate->label.c_str(),
                mib(x.memory), p.step_ms, p.tokens_per_s, 100 * p.mfu, figures.c_str(), format_duration(seconds).c_str(),
                cost);
  }
}

// One line per reason (recipe rules first), with how many layouts it rejected.
void print_rejected(const LayoutSearch& s) {
  std::map<std::string, std::pair<int, std::string>> why;  // reason -> count, first layout
  for (const LayoutCandidate& c : s.candidates) {
    const std::string reason = s.rejected(c);
    if (reason.empty()) continue;
    auto& [n, first] = why[reason];
    if (n++ == 0) first = c.label;
  }
  if (why.empty()) return;
  std::printf("rejected:\n");
  for (const auto& [reason, v] : why) std::printf("  %4d x %s (e.g. %s)\n", v.first, reason.c_str(), v.second.c_str());
}

// Every ranked layout and every rejected one, for scripts.
void write_json(const std::string& path, const LayoutSearch& s) {
  nlohmann::json j;
  j["layouts"] = nlohmann::json::array();
  for (size_t i = 0; i < s.ranked.size(); i++) {
    const RankedLayout& x = s.ranked[i];
    const StepPrediction& p = x.prediction;
    nlohmann::json layout = {{"rank", i + 1}, {"label", x.candidate->label}, {"sets", x.candidate->sets},
                             {"memory_mb", mib(x.memory)}, {"step_ms", p.step_ms},
                             {"tokens_per_s", p.tokens_per_s}, {"mfu", p.mfu}};
    for (const PredictionPart& part : kPredictionParts) layout[part.key] = p.*part.ms;
    j["layouts"].push_back(std::move(layout));
  }
  j["rejected"] = nlohmann::json::array();
  for (const LayoutCandidate& c : s.candidates)
    if (const std::string why = s.rejected(c); !why.empty())
      j["rejected"].push_back({{"label", c.label}, {"why", why}});
  std::ofstream f(path);
  f << j.dump(1) << "\n";
  if (!f) throw UserError(kExitUsage, "cannot write --json " + path);
}

// Where a profile came from and what its real steps said; `indent`: one of several.
void print_profile(const std::string& path, const MachineProfile& p, bool indent) {
  const char* at = indent ? "  " : "";
  std::printf("%s%s (%s, %s, %d %s, %s)\n", at, path.c_str(), p.host.c_str(),
              p.device.empty() ? p.cpu.c_str() : p.device.c_str(), p.compute_units,
              p.backend == "cpu" ? "cores" : "GPUs", p.created.c_str());
  if (p.step_factor() != 1)
    std::printf("%s  step times x%.2f: a real step of %s took %.1f ms where the parts below predicted %.1f "
                "(calibrate's anchor)\n",
                at, p.step_factor(), p.anchor_layout.c_str(), p.anchor_measured_ms, p.anchor_predicted_ms);
  if (p.action_measured_ms > 0)
    std::printf("%s  a pipeline action costs %.2f ms beyond its ops (alone; from a real step of %s, %.1f ms)\n", at,
                p.action_ms, p.action_layout.c_str(), p.action_measured_ms);
}

}  // namespace

int plan_search(const RecipeArgs& args, int ranks) {
  if (!args.has("--profile"))
    throw RecipeError("plan --search needs --profile FILE: make one on the machine the job will run on with "
                      "`mpirun -np N trainer calibrate RECIPE.toml --output FILE`");
  // The numbers first: a bad one is said before any file is read.
  const double price = args.number("--price-per-rank-hour", 0, 0, 1e6);
  SearchOptions o;
  o.memory_limit_gb = args.number("--memory-per-rank-gb", 0, 0, kMaxMemoryPerRankGb, true);
  const size_t top = (size_t)args.integer("--top", 10, 1, 1000000);
  o.tokens = args.has("--tokens") ? args.number("--tokens", 0, 1, 1e18) : 0;
  const long per_node_given = args.integer("--ranks-per-node", 0, 1, GridShape::kMaxRanks);  // 0: not given
  const std::vector<std::string> paths = args.list("--profile");
  const std::vector<MachineProfile> profiles = load_profiles(paths);
  const MachineProfile& profile = profiles.front();
  const int per_node = per_node_given ? (int)per_node_given : std::min(ranks, profile.ranks);
  o.ranks = ranks, o.ranks_per_node = per_node, o.all_precisions = args.has("--all-precisions");
  const Recipe base = load_recipe(args.recipe, args.overrides, 0, false);  // read once; each layout a copy
  const LayoutSearch s = search_layouts(base, profiles, o);
  const std::vector<LayoutCandidate>& cands = s.candidates;
  std::printf("search: %d ranks (%d per node), %zu layouts: %zu fit, %zu rejected; priced with ", ranks, per_node,
              cands.size(), s.ranked.size(), cands.size() - s.ranked.size());
  if (profiles.size() > 1)
    std::printf("%zu profiles, each layout at the median of their predictions:\n", profiles.size());
  for (size_t i = 0; i < profiles.size(); i++) print_profile(paths[i], profiles[i], profiles.size() > 1);
  std::printf("run: %.0f steps of %.0f tokens%s\n", s.steps, s.tokens_per_step,
              price > 0 ? "; cost at the given price per rank-hour" : "");
  if (s.ranked.empty()) {
    print_rejected(s);
    throw RecipeError("no layout of " + std::to_string(ranks) + " ranks is valid and fits (reasons above)");
  }
  print_table(s.ranked, top, s.steps, ranks, price);
  if (args.has("--json")) write_json(args.options.at("--json"), s);
  const StepPrediction& best = s.ranked.front().prediction;
  if (best.unpriced_ops || !best.unpriced_comm.empty())
    std::printf("note: %d op call(s) and collectives [%s] have no figure in the profile (counted as 0 ms): "
                "calibrate with this recipe and rank count\n",
                best.unpriced_ops, [&] {
                  std::string list;
                  for (const std::string& k : best.unpriced_comm) list += (list.empty() ? "" : " ") + k;
                  return list;
                }().c_str());
  if (s.advised) {
    const CheckpointAdvice& a = s.advice;
    std::printf("checkpoints for #1: every %ld steps (checkpoint.every = \"auto\": save %.2f s at the profile's %.0f "
                "MB/s, MTBF %.3g h): %.2f%% of the time in saves, %.2f%% expected redone after failures\n",
                a.every_steps, a.save_s, profiles[best.profile].disk_mb_per_s, base.checkpoint.mtbf_hours,
                100 * a.saves_share, 100 * a.redone_share);
  }
  std::printf("use #1:");
  for (const std::string& kv : s.ranked.front().candidate->sets) std::printf(" --set %s", kv.c_str());
  std::printf("\n");
  print_rejected(s);
  return kExitOk;
}

}  // namespace trainer
