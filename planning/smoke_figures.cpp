#include "planning/smoke_figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/layout.h"
#include "model/memory_plan.h"
#include "parallel/comm_stats.h"
#include "planning/layout_search.h"
#include "planning/step_model.h"
#include "report/run_files.h"
#include "runtime/metrics.h"
#include "runtime/metrics_fields.h"
#include "runtime/errors.h"
#include "runtime/units.h"

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

json layout_json(const Recipe& r) {
  json j = {{"cp_comm", cp_comm_name(r.parallel.cp_comm)},
            {"sequence_parallel", r.parallel.sequence_parallel},
            {"schedule", r.parallel.schedule == ScheduleKind::OneFOneB ? "1f1b" : "interleaved"},
            {"virtual_stages", r.parallel.virtual_stages}, {"micro_batch", r.training.micro_batch},
            {"recompute", recompute_name(r.recompute.mode)}, {"zero_stage", r.parallel.zero_stage},
            {"precision", dtype_name(r.training.precision)}};
  for (const GridDim& d : kGridDims) j[d.name] = r.parallel.grid.*d.size;
  return j;
}

// A field's median, 0 where the steps do not log it (this layout has no such part).
double median_or_0(const std::vector<const json*>& recs, const char* key) {
  return recs.front()->contains(key) ? median_field(recs, key) : 0.0;
}

double median_first(const std::vector<const json*>& recs, const char* key) {
  std::vector<double> v;
  for (const json* x : recs) v.push_back(first_of(*x, key));
  return median_of(v);
}

using Steps = std::vector<const json*>;
constexpr MeasuredPart kMeasuredParts[] = {
    {"compute", "compute", [](const Steps& s) { return median_first(s, mf::kPpComputeMs); }},
    {"pipeline_wait", "pipeline wait", [](const Steps& s) { return median_first(s, mf::kPpWaitMs); }},
    {"tp_comm", "tp comm", [](const Steps& s) { return comm_ms(s, "tp"); }},
    {"cp_exposed", "cp exposed", [](const Steps& s) { return median_or_0(s, mf::kCommCpExposedMs); }},
    {"pp_comm", "pp comm", [](const Steps& s) { return comm_ms(s, "pp"); }},
    {"dp_comm", "dp comm", [](const Steps& s) { return comm_ms(s, "dp"); }},
    {"dp_exposed", "dp exposed", [](const Steps& s) { return median_or_0(s, mf::kCommDpExposedMs); }},
    {"data_wait", "data wait", [](const Steps& s) { return median_field(s, mf::kDataWaitMs); }},
};

// The measured steps' figures (rank 0's view; tokens/s and MFU are the job's).
json measure(const std::vector<const json*>& recs, const Recipe& r, int ranks) {
  json m;
  std::vector<double> steps;
  for (const json* x : recs) steps.push_back(number(*x, mf::kStepMs));
  m["step_ms"] = median_of(steps);
  m["step_ms_each"] = steps;
  const double tps = r.tokens_per_step() / (median_of(steps) / 1e3);
  m["tokens_per_s"] = tps, m["tokens_per_s_per_rank"] = tps / ranks;
  m["mfu"] = median_field(recs, mf::kMfu);
  for (const MeasuredPart& part : kMeasuredParts) m["parts_ms"][part.key] = part.median(recs);
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
    m[mem_name((Mem)k)] = {{"measured_mb", mb}, {"plan_mb", mib(plan.bytes[k])}};
    measured += mb;
  }
  m["total"] = {{"measured_mb", measured}, {"plan_mb", mib(plan.total())}};
  return m;
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
  r["checkpoint_mb"] = mib(bytes), r["save_blocking_ms"] = ms;
  r["write_mb_per_s"] = std::isnan(ms) || ms <= 0 ? 0.0 : mib(bytes) / (ms / 1e3);
  return r;
}


}  // namespace

std::span<const MeasuredPart> measured_parts() { return kMeasuredParts; }

std::string layout_text(const Recipe& r) {
  return r.layout_summary() + ", micro-batch " + std::to_string(r.training.micro_batch) + ", recompute " + recompute_name(r.recompute.mode) +
         ", zero " + std::to_string(r.parallel.zero_stage) + ", " + dtype_name(r.training.precision);
}

nlohmann::json smoke_figures(const SmokeRun& run, const Recipe& r, const Recipe& user) {
  const RunFiles files = read_run_files(run.run_dir);
  const std::vector<const json*> recs = files.steps_after(run.warmup);
  if (recs.empty()) throw UserError(kExitInternal, "smoke: no step was logged in " + run.run_dir + "/metrics.jsonl");
  const int ranks = r.parallel.grid.ranks();
  json j;
  j["recipe"] = run.recipe, j["layout"] = layout_json(r), j["layout_text"] = layout_text(r);
  j["ranks"] = ranks, j["data"] = run.data, j["warmup"] = run.warmup, j["ranks_per_node"] = run.ranks_per_node;
  j["measured"] = measure(recs, r, ranks);
  j["memory"] = memory(*recs.back(), r);
  if (!run.profiles.empty()) {
    const StepPrediction p = StepModels(run.profiles, run.ranks_per_node).predict(r);
    j["predicted"] = {{"profile", run.profile_names}, {"step_ms", p.step_ms}, {"tokens_per_s", p.tokens_per_s},
                      {"mfu", p.mfu}, {"save_s", p.save_s}, {"step_factor", p.step_factor},
                      {"stages", predicted_stages(p)}};
    for (const PredictionPart& part : kPredictionParts) j["predicted"][part.key] = p.*part.ms;
  }
  const double step_ms = j["measured"]["step_ms"].get<double>();
  const double seconds = run_seconds((double)user.training.steps, step_ms);
  j["full_run"] = {{"steps", user.training.steps}, {"seconds", seconds}};
  if (run.price_per_rank_hour >= 0) j["full_run"]["cost"] = run_cost(seconds, ranks, run.price_per_rank_hour);
  // The automatic checkpoint interval, from a measured save (--check-restart
  // adds it later) or the profile's disk speed.
  if (j.contains("predicted") && j["predicted"]["save_s"].get<double>() > 0)
    j["checkpoint"] = advice_json(j["predicted"]["save_s"], "profile's disk speed", user.checkpoint.mtbf_hours, step_ms);
  return j;
}

void add_restart(json& j, const std::string& straight_dir, const std::string& restart_dir, const std::string& ckpt_dir,
                 long saved_at, double mtbf_hours) {
  j["restart"] = compare_restart(straight_dir, restart_dir, ckpt_dir, saved_at);
  const json& ms = j["restart"]["save_blocking_ms"];
  if (ms.is_number() && ms.get<double>() > 0)
    j["checkpoint"] = advice_json(ms.get<double>() / 1e3, "save measured here", mtbf_hours, j["measured"]["step_ms"].get<double>());
}

}  // namespace trainer
