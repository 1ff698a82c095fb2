#include "app/smoke_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/layout.h"
#include "model/memory_plan.h"
#include "model/param_registry.h"
#include "parallel/comm_stats.h"
#include "planning/step_model.h"
#include "report/svg_chart.h"
#include "report/run_files.h"
#include "runtime/errors.h"
#include "runtime/metrics.h"
#include "runtime/metrics_fields.h"

namespace trainer {

namespace {

namespace mf = metrics_field;
using nlohmann::json;

// Median over the measured steps of a number field (NaN where absent).
double median_field(const std::vector<const json*>& recs, const std::string& key) {
  std::vector<double> v;
  for (const json* r : recs)
    if (double x = number(*r, key.c_str()); !std::isnan(x)) v.push_back(x);
  return v.empty() ? NAN : median_of(v);
}

// Per step: the sum over a group's kinds of collective ("comm_tp_allreduce_ms"...).
double comm_ms(const std::vector<const json*>& recs, const char* group) {
  std::vector<double> v;
  for (const json* r : recs) {
    double s = 0;
    for (int k = 0; k < CommCounters::Other; k++)  // the keys engine/step_log.cpp writes
      if (double x = number(*r, (mf::comm_of(group, CommCounters::name(k)) + "ms").c_str());
          !std::isnan(x))
        s += x;
    v.push_back(s);
  }
  return v.empty() ? 0 : median_of(v);
}

double first_of(const json& r, const char* key) {
  return r.contains(key) && r[key].is_array() && !r[key].empty() ? r[key][0].get<double>() : NAN;
}

// Every pipeline stage's compute (wall time in its actions) and wait for
// the others, median over the steps: which stage paces the pipeline.
json stage_times(const std::vector<const json*>& recs) {
  json out = json::array();
  const json& first = *recs.front();
  if (!first.contains(mf::kPpComputeMs) || !first.contains(mf::kPpWaitMs)) return out;
  for (size_t s = 0; s < first[mf::kPpComputeMs].size(); s++) {
    std::vector<double> c, w;
    for (const json* x : recs)
      if (x->contains(mf::kPpComputeMs) && x->contains(mf::kPpWaitMs) && (*x)[mf::kPpComputeMs].size() > s &&
          (*x)[mf::kPpWaitMs].size() > s)
        c.push_back((*x)[mf::kPpComputeMs][s]), w.push_back((*x)[mf::kPpWaitMs][s]);
    out.push_back({{"compute_ms", median_of(c)}, {"wait_ms", median_of(w)}});
  }
  return out;
}

json predicted_stages(const StepPrediction& p) {
  json out = json::array();
  for (size_t s = 0; s < p.stage_busy_ms.size(); s++)
    out.push_back({{"compute_ms", p.stage_busy_ms[s]}, {"wait_ms", p.stage_wait_ms[s]}});
  return out;
}

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

json layout_json(const Recipe& r) {
  return {{"dp", r.grid.dp}, {"tp", r.grid.tp}, {"pp", r.grid.pp}, {"sequence_parallel", r.sequence_parallel},
          {"schedule", r.schedule == ScheduleKind::OneFOneB ? "1f1b" : "interleaved"},
          {"virtual_stages", r.virtual_stages}, {"micro_batch", r.training.micro_batch},
          {"recompute", recompute_name(r.recompute.mode)}, {"zero_stage", r.zero_stage},
          {"precision", dtype_name(r.training.precision)}};
}

// The measured steps' figures (rank 0's view; tokens/s and MFU are the job's).
json measure(const std::vector<const json*>& recs, const Recipe& r, int ranks) {
  json m;
  std::vector<double> steps;
  for (const json* x : recs) steps.push_back(number(*x, mf::kStepMs));
  m["step_ms"] = median_of(steps);
  m["step_ms_each"] = steps;
  const double tps = (double)r.training.global_batch * r.model.seq_len / (median_of(steps) / 1e3);
  m["tokens_per_s"] = tps, m["tokens_per_s_per_rank"] = tps / ranks;
  m["mfu"] = median_field(recs, mf::kMfu);
  std::vector<double> compute, wait;
  for (const json* x : recs) compute.push_back(first_of(*x, mf::kPpComputeMs)), wait.push_back(first_of(*x, mf::kPpWaitMs));
  m["parts_ms"] = {{"compute", median_of(compute)},
                   {"pipeline_wait", median_of(wait)},
                   {"tp_comm", comm_ms(recs, "tp")},
                   {"pp_comm", comm_ms(recs, "pp")},
                   {"dp_comm", comm_ms(recs, "dp")},
                   {"dp_exposed", recs.front()->contains(mf::kCommDpExposedMs) ? median_field(recs, mf::kCommDpExposedMs) : 0.0},
                   {"data_wait", median_field(recs, mf::kDataWaitMs)}};
  m["stages"] = stage_times(recs);
  return m;
}

// Rank 0's peak per memory category (the last step's peaks cover all) and
// what `trainer plan` predicts for its stage.
json memory(const json& last, const Recipe& r) {
  const MemoryPlan plan = plan_memory(r.model, rank_layout(r, 0), {r.recompute.mode, r.recompute.layers});
  json m = json::object();
  double measured = 0;
  for (int k = 0; k < kMemKinds; k++) {
    const double mb = number(last, mf::mem_peak_of(mem_name((Mem)k)).c_str());
    m[mem_name((Mem)k)] = {{"measured_mb", mb}, {"plan_mb", plan.bytes[k] / 1048576}};
    measured += mb;
  }
  m["total"] = {{"measured_mb", measured}, {"plan_mb", plan.total() / 1048576}};
  return m;
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
  std::printf("  parts (ms)  compute %.1f | pipeline wait %.1f | tp comm %.1f | pp comm %.1f | dp comm %.1f "
              "(exposed %.1f) | data wait %.1f   (rank 0)\n",
              p["compute"].get<double>(), p["pipeline_wait"].get<double>(), p["tp_comm"].get<double>(),
              p["pp_comm"].get<double>(), p["dp_comm"].get<double>(), p["dp_exposed"].get<double>(),
              p["data_wait"].get<double>());
  print_stages(m["stages"], j.contains("predicted") ? &j["predicted"]["stages"] : nullptr);
  std::printf("  memory      rank 0 peak / plan, MB:");
  for (const auto& [k, v] : j["memory"].items())
    if (v["plan_mb"].get<double>() > 0 || v["measured_mb"].get<double>() > 0)
      std::printf(" %s %.1f/%.1f", k.c_str(), v["measured_mb"].get<double>(), v["plan_mb"].get<double>());
  std::printf("\n");
  if (j.contains("predicted")) {
    const json& q = j["predicted"];
    std::printf("  predicted   %8.1f ms (measured / predicted %.2f; compute %.0f, tp %.0f, pp wait %.0f, shared %.0f, "
                "dp exposed %.0f, optimizer %.0f; all x%.2f, the profile's real step against its prediction) from %s\n",
                q["step_ms"].get<double>(), m["step_ms"].get<double>() / q["step_ms"].get<double>(),
                q["compute_ms"].get<double>(), q["tp_comm_ms"].get<double>(), q["pp_wait_ms"].get<double>(),
                q["contention_ms"].get<double>(), q["dp_exposed_ms"].get<double>(), q["optimizer_ms"].get<double>(),
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

double dir_bytes(const std::string& dir) {
  double n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) n += (double)e.file_size(ec);
  return n;
}

// The first step whose loss or gradient norm differs, as words; "" if none.
std::string first_difference(const RunFiles& a, const RunFiles& b, long after, long* compared) {
  const auto sa = a.latest_by_step(), sb = b.latest_by_step();
  *compared = 0;
  for (const auto& [step, ra] : sa) {
    if (step <= after) continue;
    auto it = sb.find(step);
    if (it == sb.end()) return "step " + std::to_string(step) + " is missing after the restart";
    for (const char* key : {mf::kLoss, mf::kGradNorm}) {
      const json &x = (*ra)[key], &y = (*it->second)[key];
      if (x != y)
        return "step " + std::to_string(step) + ": " + key + " " + y.dump() + " after the restart, " + x.dump() +
               " without one";
    }
    ++*compared;
  }
  return *compared ? "" : "no step after the save was logged";
}

}  // namespace

json advice_json(double save_s, const std::string& source, double mtbf_hours, double step_ms) {
  const CheckpointAdvice a = checkpoint_advice(save_s, mtbf_hours, step_ms);
  return {{"every_steps", a.every_steps}, {"save_s", save_s}, {"save_from", source}, {"mtbf_hours", mtbf_hours},
          {"saves_share", a.saves_share}, {"redone_share", a.redone_share}};
}

json compare_restart(const std::string& straight_dir, const std::string& restart_dir, const std::string& ckpt_dir,
                     long saved_at) {
  json r;
  long compared = 0;
  const RunFiles restarted = read_run_files(restart_dir);  // (latest_by_step points into it)
  const std::string diff = first_difference(read_run_files(straight_dir), restarted, saved_at, &compared);
  r["saved_at_step"] = saved_at, r["steps_compared"] = compared, r["identical"] = diff.empty();
  if (!diff.empty()) r["first_difference"] = diff;
  const auto recs = restarted.latest_by_step();
  const double ms = recs.count(saved_at) ? number(*recs.at(saved_at), mf::kCkptMs) : NAN;
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "/step_%08ld", saved_at);
  const double bytes = dir_bytes(ckpt_dir + step_dir);
  r["checkpoint_mb"] = bytes / 1048576, r["save_blocking_ms"] = ms;
  r["write_mb_per_s"] = std::isnan(ms) || ms <= 0 ? 0.0 : bytes / 1048576 / (ms / 1e3);
  return r;
}

namespace {

// Exit 9 with one line per shortfall; 0 when none.
int verdict(const RecipeArgs& args, json& j) {
  std::vector<std::string> fails;
  const double mfu = j["measured"]["mfu"], tps = j["measured"]["tokens_per_s"];
  char b[256];
  if (args.has("--min-mfu") && mfu < args.number("--min-mfu", 0, 0)) {
    std::snprintf(b, sizeof b, "MFU %.1f%% is below --min-mfu %.1f%%", 100 * mfu, 100 * args.number("--min-mfu", 0, 0));
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
    const double tol = args.number("--tolerance", 0.1, 0), was = base.at("measured").at("tokens_per_s");
    if (base.value("layout_text", "") != j["layout_text"])
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

std::string layout_text(const Recipe& r) {
  std::string s = "dp " + std::to_string(r.grid.dp) + " x tp " + std::to_string(r.grid.tp) +
                  (r.sequence_parallel && r.grid.tp > 1 ? " (sp)" : "") + " x pp " + std::to_string(r.grid.pp);
  if (r.grid.pp > 1) s += r.schedule == ScheduleKind::OneFOneB ? " 1f1b" : " interleaved x" + std::to_string(r.virtual_stages);
  return s + ", micro-batch " + std::to_string(r.training.micro_batch) + ", recompute " + recompute_name(r.recompute.mode) +
         ", zero " + std::to_string(r.zero_stage) + ", " + dtype_name(r.training.precision);
}

nlohmann::json smoke_figures(const RecipeArgs& args, const SmokeRun& run, const Recipe& r, const Recipe& user) {
  const RunFiles files = read_run_files(run.run_dir);
  const std::vector<const json*> recs = files.steps_after(run.warmup);
  if (recs.empty()) throw UserError(kExitInternal, "smoke: no step was logged in " + run.run_dir + "/metrics.jsonl");
  const int ranks = r.grid.dp * r.grid.tp * r.grid.pp;
  json j;
  j["recipe"] = args.recipe, j["layout"] = layout_json(r), j["layout_text"] = layout_text(r);
  j["ranks"] = ranks, j["data"] = run.data, j["warmup"] = run.warmup, j["ranks_per_node"] = run.ranks_per_node;
  j["measured"] = measure(recs, r, ranks);
  j["memory"] = memory(*recs.back(), r);
  if (args.has("--profile")) {
    const std::vector<MachineProfile> profiles = load_profiles(args.list("--profile"));
    const StepPrediction p = StepModels(profiles, run.ranks_per_node).predict(r);
    j["predicted"] = {{"profile", args.options.at("--profile")}, {"step_ms", p.step_ms}, {"compute_ms", p.compute_ms},
                      {"recompute_ms", p.recompute_ms}, {"tp_comm_ms", p.tp_comm_ms}, {"pp_wait_ms", p.pp_wait_ms},
                      {"contention_ms", p.contention_ms}, {"dp_exposed_ms", p.dp_exposed_ms},
                      {"optimizer_ms", p.optimizer_ms}, {"tokens_per_s", p.tokens_per_s}, {"mfu", p.mfu},
                      {"save_s", p.save_s}, {"step_factor", p.step_factor}, {"stages", predicted_stages(p)}};
  }
  const double step_ms = j["measured"]["step_ms"].get<double>();
  const double seconds = user.training.steps * step_ms / 1e3;
  j["full_run"] = {{"steps", user.training.steps}, {"seconds", seconds}};
  if (args.has("--price-per-rank-hour"))
    j["full_run"]["cost"] = seconds / 3600 * ranks * args.number("--price-per-rank-hour", 0, 0);
  // The automatic checkpoint interval, from a measured save (--check-restart
  // adds it later) or the profile's disk speed.
  if (j.contains("predicted") && j["predicted"]["save_s"].get<double>() > 0)
    j["checkpoint"] = advice_json(j["predicted"]["save_s"], "profile's disk speed", user.checkpoint.mtbf_hours, step_ms);
  return j;
}

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
