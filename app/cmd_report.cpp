// `trainer report RUN_DIR [--output FILE.html]`: a page people can look at
// (report/run_report.h), from the run's files and its resolved recipe: safe
// while the run goes on, and across the launches of a supervised run.
#include <cstdio>
#include <cstring>
#include <string>

#include "app/commands.h"
#include "ckpt/output_guard.h"
#include "app/recipe.h"
#include "engine/layout.h"
#include "model/memory_plan.h"
#include "model/param_registry.h"
#include "report/run_report.h"
#include "runtime/units.h"
#include "runtime/errors.h"
#include "runtime/flight_recorder.h"
#include "runtime/replace_file.h"
#include "runtime/version.h"

namespace trainer {

namespace {

const char* kReportUsage =
    "usage: trainer report RUN_DIR [--output FILE.html] [--force]\n"
    "  One self-contained HTML page about a run (charts drawn as inline SVG; no scripts,\n"
    "  nothing fetched from the network): loss and validation loss against step and\n"
    "  tokens, learning rate, gradient norm, tokens/s, MFU, where the step time goes,\n"
    "  memory by category against the plan, launches with their versions, and the\n"
    "  supervisor's events, checkpoints, skipped updates and stragglers on a time axis.\n"
    "  Reads RUN_DIR's metrics.jsonl, launches.jsonl, events.jsonl, heartbeat and\n"
    "  recipe.resolved.toml; safe while the run goes on (run it again to refresh).\n"
    "  --output: where to write it (default RUN_DIR/report.html): never inside a checkpoint\n"
    "  directory, and over an existing file only when it is an earlier report (--force: any file).\n"
    "  Exit 0; 2 when RUN_DIR is not a run directory or the page cannot be written there.\n";

std::string join_sources(const std::vector<DataSource>& v) {
  std::string s;
  for (const DataSource& d : v)
    s += (s.empty() ? "" : ", ") + (d.name.empty() ? d.path : d.name + " = " + d.path) +
         (d.weight > 0 ? " (weight " + format_number(d.weight) + ")" : "");
  return s.empty() ? "none" : s;
}

// The recipe's summary rows, the tokens per step and the memory plan.
void add_recipe_facts(const Recipe& r, ReportFacts& f) {
  const ModelConfig& m = r.model;
  f.run_name = r.run.name;
  f.steps = r.training.steps;
  f.tokens_per_step = r.tokens_per_step();
  auto add = [&](const std::string& k, const std::string& v) { f.recipe.emplace_back(k, v); };
  add("model", std::string(arch_name(m.arch)) + ", " + format_count((double)build_params(m).reg.total()) +
                   " parameters");
  add("shape", "d_model " + std::to_string(m.d_model) + ", " + std::to_string(m.n_layers) + " layers, " +
                   std::to_string(m.n_heads) + " heads (" + std::to_string(m.kv_heads()) + " kv), d_ff " +
                   std::to_string(m.d_ff) + ", vocabulary " + std::to_string(m.vocab_size) +
                   (m.tie_embeddings ? ", tied embeddings" : ""));
  add("batch", std::to_string(r.training.global_batch) + " x " + std::to_string(m.seq_len) + " = " +
                   format_count(f.tokens_per_step) + " tokens per step, micro-batch " +
                   std::to_string(r.training.micro_batch) + ", " + std::to_string(r.accum_steps()) +
                   " accumulation step(s)");
  add("layout", r.layout_summary());
  add("training", std::to_string(r.training.steps) + " steps, lr " + format_number(r.lr.lr) + " " +
                      schedule_name(r.lr.schedule) + " to " + format_number(r.lr.min_lr) + " after " +
                      std::to_string(r.lr.warmup_steps) + " warm-up steps, grad clip " +
                      format_number(r.training.grad_clip));
  add("precision, recompute", std::string(dtype_name(r.training.precision)) + ", recompute " +
                                  recompute_name(r.recompute.mode));
  add("train data", join_sources(r.data.train));
  add("validation data", join_sources(r.data.val));
  const std::string every = r.checkpoint.automatic() ? "at the automatic interval (checkpoint.every = \"auto\")"
                                                      : "every " + std::to_string(r.checkpoint.every) + " steps";
  add("checkpoints", r.checkpoint.saves() ? every + (r.checkpoint.async ? " (async)" : "") + " in " + r.checkpoint.dir
                                          : "none");
  if (!r.checkpoint.init_from.empty()) add("initial weights", r.checkpoint.init_from);
  const MemoryPlan p = plan_memory(m, rank_layout(r, 0), r.recompute);
  for (int k = 0; k < kMemKinds; k++) f.plan_mb[k] = mib(p.bytes[k]);
  f.has_plan = true;
  f.plan_note = std::string("trainer plan's prediction for pipeline stage 0 (rank 0's), recompute ") +
                recompute_name(r.recompute.mode) + ".";
}

}  // namespace

int cmd_report(int argc, char** argv) {
  std::string dir, out;
  bool force = false;
  for (int i = 0; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return std::fputs(kReportUsage, stdout), kExitOk;
    if (a == "--output" && i + 1 < argc) out = argv[++i];
    else if (a == "--force") force = true;
    else if (a.rfind("--", 0) != 0 && dir.empty()) dir = a;
    else {
      std::fprintf(stderr, "error: unexpected argument '%s'\n%s", a.c_str(), kReportUsage);
      return kExitUsage;
    }
  }
  if (dir.empty()) return std::fputs(kReportUsage, stderr), kExitUsage;
  if (out.empty()) out = dir + "/report.html";
  check_output_path(out, "run report", force, is_run_report);
  const RunFiles files = read_run_files(dir);
  if (files.metrics.empty() && files.events.empty() && files.launches.empty()) {
    std::fprintf(stderr, "error: %s has no metrics.jsonl, launches.jsonl or events.jsonl: not a run directory "
                         "(the recipe's [run] dir), or the run has not logged a step yet\n", dir.c_str());
    return kExitUsage;
  }
  ReportFacts facts;
  facts.run_dir = dir;
  facts.run_name = dir;
  facts.now = wall_seconds();
  facts.generated_by = std::string("trainer ") + kTrainerVersion + " (git " + trainer_git_commit() + ")";
  try {
    add_recipe_facts(load_recipe(dir + "/recipe.resolved.toml", {}, 0, false), facts);
  } catch (const std::exception& e) {
    facts.recipe_error = dir + "/recipe.resolved.toml: " + e.what() + " (no recipe summary, tokens axis or plan)";
  }
  if (const std::string err = replace_file(out, render_report(files, facts), false); !err.empty()) {
    std::fprintf(stderr, "error: cannot write the report: %s\n", err.c_str());
    return kExitUsage;
  }
  std::printf("report: %s (%zu step records, %zu launch(es), %zu supervisor event(s))\n", out.c_str(),
              files.metrics.size(), files.launches.size(), files.events.size());
  return kExitOk;
}

}  // namespace trainer
