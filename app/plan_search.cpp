// `trainer plan RECIPE --ranks N --search --profile FILE`: every layout of N
// ranks (planning/layout_candidates.h), checked, fitted to memory, priced by the
// cost model (planning/step_model.h) and ranked by predicted step time.
#include "app/plan_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "planning/layout_candidates.h"
#include "planning/memory_fit.h"
#include "app/recipe.h"
#include "planning/step_model.h"
#include "report/svg_chart.h"
#include "runtime/errors.h"

namespace trainer {

namespace {

struct Ranked {
  const LayoutCandidate* c;
  StepPrediction p;
  double memory = 0;  // bytes, the rank that needs most
};

void print_table(const std::vector<Ranked>& ranked, size_t top, double steps, int ranks, double price) {
  std::printf("%-4s %-48s %9s %9s %10s %6s  %s\n", "#", "layout", "MB/rank", "step ms", "tokens/s", "MFU",
              "compute (recompute) tp-comm pp-wait shared dp-exposed optimizer, ms | run time, cost");
  for (size_t i = 0; i < std::min(top, ranked.size()); i++) {
    const Ranked& x = ranked[i];
    const StepPrediction& p = x.p;
    const double seconds = steps * p.step_ms / 1e3;
    char cost[48] = "";
    if (price > 0) std::snprintf(cost, sizeof cost, ", $%.2f", seconds / 3600 * ranks * price);
    std::printf("%-4zu %-48s %9.1f %9.1f %10.0f %5.1f%%  %.0f (%.0f) %.0f %.0f %.0f %.0f %.0f | %s%s\n", i + 1,
                x.c->label.c_str(), x.memory / 1048576, p.step_ms, p.tokens_per_s, 100 * p.mfu, p.compute_ms,
                std::max(0.0, p.recompute_ms), std::max(0.0, p.tp_comm_ms), std::max(0.0, p.pp_wait_ms),
                std::max(0.0, p.contention_ms), p.dp_exposed_ms, p.optimizer_ms,
                format_duration(seconds).c_str(), cost);
  }
}

// One line per reason (recipe rules first), with how many layouts it rejected.
void print_rejected(const std::vector<LayoutCandidate>& cands, const std::map<const LayoutCandidate*, std::string>& memory) {
  std::map<std::string, std::pair<int, std::string>> why;  // reason -> count, first layout
  for (const LayoutCandidate& c : cands) {
    auto m = memory.find(&c);
    const std::string reason = !c.rejected.empty() ? c.rejected : m != memory.end() ? "memory: " + m->second : "";
    if (reason.empty()) continue;
    auto& [n, first] = why[reason];
    if (n++ == 0) first = c.label;
  }
  if (why.empty()) return;
  std::printf("rejected:\n");
  for (const auto& [reason, v] : why) std::printf("  %4d x %s (e.g. %s)\n", v.first, reason.c_str(), v.second.c_str());
}

// Every ranked layout and every rejected one, for scripts.
void write_json(const std::string& path, const std::vector<Ranked>& ranked, const std::vector<LayoutCandidate>& cands,
                const std::map<const LayoutCandidate*, std::string>& memory) {
  nlohmann::json j;
  j["layouts"] = nlohmann::json::array();
  for (size_t i = 0; i < ranked.size(); i++) {
    const StepPrediction& p = ranked[i].p;
    j["layouts"].push_back({{"rank", i + 1}, {"label", ranked[i].c->label}, {"sets", ranked[i].c->sets},
                            {"memory_mb", ranked[i].memory / 1048576}, {"step_ms", p.step_ms},
                            {"compute_ms", p.compute_ms}, {"recompute_ms", p.recompute_ms},
                            {"tp_comm_ms", p.tp_comm_ms}, {"pp_wait_ms", p.pp_wait_ms},
                            {"contention_ms", p.contention_ms}, {"dp_comm_ms", p.dp_comm_ms},
                            {"dp_exposed_ms", p.dp_exposed_ms}, {"optimizer_ms", p.optimizer_ms},
                            {"tokens_per_s", p.tokens_per_s}, {"mfu", p.mfu}});
  }
  j["rejected"] = nlohmann::json::array();
  for (const LayoutCandidate& c : cands) {
    auto m = memory.find(&c);
    if (!c.rejected.empty() || m != memory.end())
      j["rejected"].push_back({{"label", c.label}, {"why", c.rejected.empty() ? "memory: " + m->second : c.rejected}});
  }
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
  const std::vector<std::string> paths = args.list("--profile");
  const std::vector<MachineProfile> profiles = load_profiles(paths);
  const MachineProfile& profile = profiles.front();
  const int per_node = (int)args.integer("--ranks-per-node", std::min(ranks, profile.ranks), 1);
  const double price = args.number("--price-per-rank-hour", 0, 0);
  const double limit_gb = args.number("--memory-per-rank-gb", 0, 0);
  const size_t top = (size_t)args.integer("--top", 10, 1);
  const Recipe base = load_recipe(args.recipe, args.overrides, 0, false);  // read once; each layout a copy
  const std::vector<LayoutCandidate> cands = layout_candidates(base, ranks, args.has("--all-precisions"));
  StepModels model(profiles, per_node);
  std::vector<Ranked> ranked;
  std::map<const LayoutCandidate*, std::string> memory;
  for (const LayoutCandidate& c : cands) {
    if (!c.rejected.empty()) continue;
    const MemoryFit fit = check_memory_fit(c.recipe, -1, true, per_node);
    const bool fits = limit_gb > 0 ? fit.need <= limit_gb * 1073741824.0 : fit.fits;
    if (!fits) {
      char b[96];
      std::snprintf(b, sizeof b, "needs %.2f GB per rank, %.2f GB available", fit.need / 1073741824.0,
                    limit_gb > 0 ? limit_gb : fit.available / 1073741824.0);
      memory[&c] = b;
      continue;
    }
    ranked.push_back({&c, model.predict(c.recipe), fit.need});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Ranked& a, const Ranked& b) { return a.p.step_ms < b.p.step_ms; });
  const double tokens_per_step = (double)base.training.global_batch * base.model.seq_len;
  const double steps = args.has("--tokens") ? std::ceil(args.number("--tokens", 0, 1) / tokens_per_step)
                                            : (double)base.training.steps;
  std::printf("search: %d ranks (%d per node), %zu layouts: %zu fit, %zu rejected; priced with ", ranks, per_node,
              cands.size(), ranked.size(), cands.size() - ranked.size());
  if (profiles.size() > 1)
    std::printf("%zu profiles, each layout at the median of their predictions:\n", profiles.size());
  for (size_t i = 0; i < profiles.size(); i++) print_profile(paths[i], profiles[i], profiles.size() > 1);
  std::printf("run: %.0f steps of %.0f tokens%s\n", steps, tokens_per_step,
              price > 0 ? "; cost at the given price per rank-hour" : "");
  if (ranked.empty()) {
    print_rejected(cands, memory);
    throw RecipeError("no layout of " + std::to_string(ranks) + " ranks is valid and fits (reasons above)");
  }
  print_table(ranked, top, steps, ranks, price);
  if (args.has("--json")) write_json(args.options.at("--json"), ranked, cands, memory);
  const StepPrediction& best = ranked.front().p;
  if (best.unpriced_ops || !best.unpriced_comm.empty())
    std::printf("note: %d op call(s) and collectives [%s] have no figure in the profile (counted as 0 ms): "
                "calibrate with this recipe and rank count\n",
                best.unpriced_ops, [&] {
                  std::string s;
                  for (const std::string& k : best.unpriced_comm) s += (s.empty() ? "" : " ") + k;
                  return s;
                }().c_str());
  if (best.save_s > 0) {
    const CheckpointAdvice a = checkpoint_advice(best.save_s, base.checkpoint.mtbf_hours, best.step_ms);
    std::printf("checkpoints for #1: every %ld steps (checkpoint.every = \"auto\": save %.2f s at the profile's %.0f "
                "MB/s, MTBF %.3g h): %.2f%% of the time in saves, %.2f%% expected redone after failures\n",
                a.every_steps, a.save_s, profiles[best.profile].disk_mb_per_s, base.checkpoint.mtbf_hours,
                100 * a.saves_share, 100 * a.redone_share);
  }
  std::printf("use #1:");
  for (const std::string& s : ranked.front().c->sets) std::printf(" --set %s", s.c_str());
  std::printf("\n");
  print_rejected(cands, memory);
  return kExitOk;
}

}  // namespace trainer
