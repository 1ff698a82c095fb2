// `trainer smoke RECIPE.toml`: the throughput smoke test run before a long
// job or after a cluster change. A few steps of the recipe's real layout
// through `trainer train`'s own code, in a scratch directory (no checkpoint
// or metrics touch the run's), then rank 0 reports what they measured
// against the plan and the cost model, and can gate on it (exit 9).
#include <mpi.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/commands.h"
#include "parallel/mpi_command.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "app/scratch_run.h"
#include "app/smoke_report.h"
#include "planning/smoke_figures.h"
#include "engine/job.h"
#include "runtime/errors.h"
#include "parallel/mpi_world.h"

namespace trainer {

namespace {

const char* kSmokeUsage =
    "usage: [mpirun -np N] trainer smoke RECIPE.toml [--set section.key=value ...] [--steps N]\n"
    "            [--warmup N] [--profile FILE] [--json FILE] [--min-mfu X] [--baseline FILE]\n"
    "            [--tolerance F] [--price-per-rank-hour X] [--synthetic] [--check-restart] [--keep]\n"
    "  Runs the recipe's layout for --steps optimizer steps (default 10) through the same\n"
    "  code as `trainer train`, in a scratch directory under $TMPDIR (removed after; --keep\n"
    "  keeps it): no checkpoint or metrics go into the run's directories. Reports, over the\n"
    "  steps after --warmup (default 2): tokens/s per rank and in all, MFU, the step time\n"
    "  and its parts (compute, pipeline wait, tensor/pipeline/data-parallel communication,\n"
    "  context-parallel transfers exposed, data wait), each pipeline stage's compute and\n"
    "  wait (beside the model's with --profile), rank 0's peak memory per category\n"
    "  against `trainer plan`, the step time the cost model predicts (--profile, from\n"
    "  `trainer calibrate`; several, comma-separated: the median of their predictions),\n"
    "  and the full run's projected wall time and cost.\n"
    "  --synthetic      random tokens instead of the recipe's data (also when its data\n"
    "                   files are missing)\n"
    "  --json FILE      all of it as JSON (the input of a later --baseline)\n"
    "  --min-mfu X      exit 9 when MFU is below X (a fraction, 0.3 = 30%)\n"
    "  --baseline FILE  exit 9 when tokens/s is more than --tolerance (default 0.1)\n"
    "                   below that earlier smoke's\n"
    "  --check-restart  also save a checkpoint after the warm-up steps (write MB/s and\n"
    "                   blocking time), run a second launch resumed from it, and exit 9\n"
    "                   unless its steps equal the first launch's bit for bit\n";

const RecipeArgsSpec kSmokeArgs = {"smoke", kSmokeUsage, {"--synthetic", "--check-restart", "--keep"},
                                   {"--steps", "--warmup", "--profile", "--json", "--min-mfu", "--baseline", "--tolerance",
                                    "--price-per-rank-hour"}};

// --check-restart: a first launch that saves at step k and stops, a second
// (launch 1 to faults, as under the supervisor) that resumes from that
// checkpoint to the end; both in their own scratch directories.
int restart_launches(const RecipeArgs& args, const Scratch& s, long steps, long k, int rank, int size) {
  std::vector<std::string> a = train_args(args.recipe, args.overrides, s, steps);
  const std::vector<std::string> first = {"run.dir=\"" + s.dir + "/restart_run\"",
                                          "checkpoint.dir=\"" + s.dir + "/restart_ckpt\"",
                                          "checkpoint.every=" + std::to_string(k), "checkpoint.keep=0",
                                          "checkpoint.async=false", "training.exit_after=" + std::to_string(k)};
  for (const std::string& kv : first) a.push_back("--set"), a.push_back(kv);
  int code = run_inside(a, rank, size);
  if (code) return code;
  a.insert(a.end(), {"--set", "training.exit_after=0", "--set", "checkpoint.every=0", "--set", "checkpoint.resume=\"auto\""});
  setenv("TRAINER_ATTEMPT", "1", 1);
  code = run_inside(a, rank, size);
  unsetenv("TRAINER_ATTEMPT");
  return code;
}

int smoke(const RecipeArgs& args, int rank, int size) {
  const long steps = args.integer("--steps", 10, 1, 1000000), warmup = args.integer("--warmup", 2, 0, 1000000);
  if (args.has("--check-restart") && steps < 2)
    throw RecipeError("smoke --check-restart needs --steps >= 2: a save, then steps after it");
  if (warmup >= steps) throw RecipeError("smoke: --warmup " + std::to_string(warmup) + " leaves no step of --steps " +
                                         std::to_string(steps) + " to measure");
  Scratch s;
  int code = shared_scratch(args.recipe, args.overrides, args.has("--synthetic"), rank, size, steps, s);
  if (code) return code;
  if (rank == 0 && !s.note.empty()) std::fprintf(stderr, "smoke: %s\n", s.note.c_str());
  code = run_inside(train_args(args.recipe, args.overrides, s, steps), rank, size);
  const long k = std::max(1L, warmup);  // --check-restart saves after the warm-up steps
  if (code == 0 && args.has("--check-restart")) code = restart_launches(args, s, steps, k, rank, size);
  SmokeRun run;
  run.recipe = args.recipe, run.run_dir = s.dir + "/run", run.data = s.data.empty() ? "recipe" : "synthetic";
  run.warmup = (int)warmup, run.ranks_per_node = ranks_on_node();
  if (code == 0 && rank == 0) {
    if (args.has("--profile"))
      run.profiles = load_profiles(args.list("--profile")), run.profile_names = args.options.at("--profile");
    if (args.has("--price-per-rank-hour")) run.price_per_rank_hour = args.number("--price-per-rank-hour", 0, 0, 1e6);
    const Recipe ran = load_recipe(s.dir + "/run/recipe.resolved.toml", {}, 0, false);
    const Recipe user = load_recipe(args.recipe, args.overrides, size, false);
    nlohmann::json j = smoke_figures(run, ran, user);
    if (args.has("--check-restart"))
      add_restart(j, run.run_dir, s.dir + "/restart_run", s.dir + "/restart_ckpt", k, user.checkpoint.mtbf_hours);
    code = report_smoke(args, j);
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0 && !args.has("--keep")) std::filesystem::remove_all(s.dir);
  if (rank == 0 && args.has("--keep")) std::fprintf(stderr, "smoke: kept %s\n", s.dir.c_str());
  return code;
}

}  // namespace

int cmd_smoke(int argc, char** argv) {
  const RecipeArgs args = parse_recipe_args(kSmokeArgs, argc, argv);
  if (args.help) return std::fputs(kSmokeUsage, stdout), kExitOk;
  return run_under_mpi([&](int rank, int size) { return smoke(args, rank, size); });
}

}  // namespace trainer
