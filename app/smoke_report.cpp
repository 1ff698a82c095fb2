#include "app/smoke_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "planning/smoke_figures.h"
#include "planning/step_model.h"
#include "runtime/errors.h"
#include "runtime/units.h"

namespace trainer {

namespace {

using nlohmann::json;

// One stage per entry, "compute/wait" (with the prediction's in brackets).
void print_stages(const json& measured, const json* predicted) {
  if (measured.size() < 2) return;
  std::printf("  stages (ms) compute/pipeline wait per stage%s:", predicted ? ", measured (predicted)" : "");
  for (size_t s = 0; s < measured.size(); s++) {
    std::printf("%s %zu %.0f/%.0f", s ? " |" : "", s, measured[s]["compute_ms"].get<double>(),
                measured[s]["wait_ms"].get<double>());
    if (predicted && s < predicted->size())
      std::printf(" (%.0f/%.0f)", (*predicted)[s]["compute_ms"].get<double>(),
                  (*predicted)[s]["wait_ms"].get<double>());
  }
  std::printf("\n");
}

void print_report(const json& j) {
  const json& m = j["measured"];
  const json& p = m["parts_ms"];
  const std::vector<double> each = m["step_ms_each"];
  std::printf("smoke %s: %s, %s data, %d ranks; %zu steps measured after %d warm-up\n", j["recipe"].get<std::string>().c_str(),
              j["layout_text"].get<std::string>().c_str(), j["data"].get<std::string>().c_str(), j["ranks"].get<int>(),
              each.size(), j["warmup"].get<int>());
  std::printf("  step        %8.1f ms median (%.1f to %.1f)\n", m["step_ms"].get<double>(),
              *std::min_element(each.begin(), each.end()), *std::max_element(each.begin(), each.end()));
  std::printf("  throughput  %8.0f tokens/s in all, %.0f per rank; MFU %.1f%%\n", m["tokens_per_s"].get<double>(),
              m["tokens_per_s_per_rank"].get<double>(), 100 * m["mfu"].get<double>());
  std::printf("  parts (ms) ");
  for (const MeasuredPart& part : measured_parts())
    std::printf("%s %s %.1f", &part == measured_parts().data() ? "" : " |", part.words, p[part.key].get<double>());
  std::printf("   (rank 0)\n");
  print_stages(m["stages"], j.contains("predicted") ? &j["predicted"]["stages"] : nullptr);
  std::printf("  memory      rank 0 peak / plan, MB:");
  for (const auto& [k, v] : j["memory"].items())
    if (v["plan_mb"].get<double>() > 0 || v["measured_mb"].get<double>() > 0)
      std::printf(" %s %.1f/%.1f", k.c_str(), v["measured_mb"].get<double>(), v["plan_mb"].get<double>());
  std::printf("\n");
  if (j.contains("predicted")) {
    const json& q = j["predicted"];
    std::string parts;
    for (const PredictionPart& part : kPredictionParts) {
      if (!part.words) continue;
      char b[96];
      std::snprintf(b, sizeof b, "%s%s %.0f", parts.empty() ? "" : ", ", part.words, q[part.key].get<double>());
      parts += b;
    }
    std::printf("  predicted   %8.1f ms (measured / predicted %.2f; %s; all x%.2f, the profile's real step against its "
                "prediction) from %s\n",
                q["step_ms"].get<double>(), m["step_ms"].get<double>() / q["step_ms"].get<double>(), parts.c_str(),
                q["step_factor"].get<double>(), q["profile"].get<std::string>().c_str());
  }
  if (j.contains("restart")) {
    const json& r = j["restart"];
    std::printf("  restart     checkpoint of step %ld: %.1f MB, %.0f ms blocking (%.0f MB/s); resumed in a second "
                "launch: %s\n",
                r["saved_at_step"].get<long>(), r["checkpoint_mb"].get<double>(), r["save_blocking_ms"].get<double>(),
                r["write_mb_per_s"].get<double>(),
                r["identical"].get<bool>() ? (std::to_string(r["steps_compared"].get<long>()) +
                                              " steps after it identical to the uninterrupted run, bit for bit").c_str()
                                           : r["first_difference"].get<std::string>().c_str());
  }
  if (j.contains("checkpoint")) {
    const json& c = j["checkpoint"];
    std::printf("  checkpoints every %ld steps (checkpoint.every = \"auto\": save %.2f s from the %s, MTBF %.3g h): "
                "%.2f%% of the time in saves, %.2f%% expected redone\n",
                c["every_steps"].get<long>(), c["save_s"].get<double>(), c["save_from"].get<std::string>().c_str(),
                c["mtbf_hours"].get<double>(), 100 * c["saves_share"].get<double>(), 100 * c["redone_share"].get<double>());
  }
  const json& f = j["full_run"];
  std::printf("  full run    %ld steps: %s", f["steps"].get<long>(),
              format_duration(f["seconds"].get<double>()).c_str());
  if (f.contains("cost")) std::printf(", $%.2f", f["cost"].get<double>());
  std::printf("\n");
}

// Exit 9 with one line per shortfall; 0 when none.
int verdict(const RecipeArgs& args, json& j) {
  std::vector<std::string> fails;
  const double mfu = j["measured"]["mfu"], tps = j["measured"]["tokens_per_s"];
  char b[256];
  if (args.has("--min-mfu") && mfu < args.number("--min-mfu", 0, 0, 1)) {
    std::snprintf(b, sizeof b, "MFU %.1f%% is below --min-mfu %.1f%%", 100 * mfu, 100 * args.number("--min-mfu", 0, 0, 1));
    fails.push_back(b);
  }
  if (args.has("--baseline")) {
    const std::string path = args.options.at("--baseline");
    std::ifstream f(path);
    json base;
    try {
      base = json::parse(f);
    } catch (const json::exception& e) {
      throw UserError(kExitUsage, "--baseline " + path + " is not a smoke JSON (" + e.what() + ")");
    }
    const double tol = args.number("--tolerance", 0.1, 0, 1), was = base.at("measured").at("tokens_per_s");
    // The layouts as data (smoke JSONs have carried them beside the words,
    // whose form may change between versions).
    if (base.contains("layout") ? base["layout"] != j["layout"] : base.value("layout_text", "") != j["layout_text"])
      std::fprintf(stderr, "smoke: note: the baseline ran %s, this run %s\n", base.value("layout_text", "?").c_str(),
                   j["layout_text"].get<std::string>().c_str());
    j["baseline"] = {{"file", path}, {"tokens_per_s", was}, {"tolerance", tol}, {"ratio", tps / was}};
    if (tps < was * (1 - tol)) {
      std::snprintf(b, sizeof b, "%.0f tokens/s is %.1f%% below the baseline's %.0f (%s; --tolerance %.0f%%)", tps,
                    100 * (1 - tps / was), was, path.c_str(), 100 * tol);
      fails.push_back(b);
    }
  }
  if (j.contains("restart") && !j["restart"]["identical"].get<bool>())
    fails.push_back("the restart from the checkpoint of step " + std::to_string(j["restart"]["saved_at_step"].get<long>()) +
                    " does not continue as the uninterrupted run: " + j["restart"]["first_difference"].get<std::string>());
  j["passed"] = fails.empty();
  j["failures"] = fails;
  for (const std::string& s : fails) std::fprintf(stderr, "smoke: FAILED: %s\n", s.c_str());
  return fails.empty() ? kExitOk : kExitSmokeShortfall;
}

}  // namespace

int report_smoke(const RecipeArgs& args, nlohmann::json& j) {
  print_report(j);
  const int code = verdict(args, j);
  if (args.has("--json")) {
    std::ofstream f(args.options.at("--json"));
    f << j.dump(1) << "\n";
    if (!f) throw UserError(kExitUsage, "cannot write --json " + args.options.at("--json"));
  }
  return code;
}

}  // namespace trainer
