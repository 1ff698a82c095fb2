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
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/mpi_command.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "app/smoke_report.h"
#include "data/shard_writer.h"
#include "engine/job.h"
#include "runtime/errors.h"
#include "runtime/rng.h"

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
    "  data wait), rank 0's peak memory per category against `trainer plan`, the step\n"
    "  time the cost model predicts (--profile, from `trainer calibrate`), and the full\n"
    "  run's projected wall time and cost.\n"
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

// Random tokens for every sample the steps read, as one llm.c shard.
std::string write_synthetic_data(const Recipe& r, const std::string& dir, long steps) {
  const size_t n = (size_t)(steps + 1) * r.training.global_batch * (r.model.seq_len + 1) + 1;
  std::vector<uint32_t> tokens(n);
  Rng rng(r.run.seed, "smoke");
  for (uint32_t& t : tokens) t = (uint32_t)rng.below(r.model.vocab_size);
  for (const std::string& path : write_shard(ShardFormat::Llmc, dir + "/synthetic", tokens.data(), n, {n},
                                             (uint32_t)r.model.vocab_size))
    std::filesystem::rename(path + ".new", path);
  return dir + "/synthetic.bin";
}

// Rank 0 decides: the scratch directory, and whether the data is synthetic.
struct Scratch {
  std::string dir, data;  // data: the synthetic shard, or "" for the recipe's own
  std::string note;
};

Scratch make_scratch(const RecipeArgs& args, int size, long steps) {
  Scratch s;
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/trainer-smoke-XXXXXX";
  if (!mkdtemp(templ.data())) throw UserError(kExitUsage, "cannot make a scratch directory " + templ + " ($TMPDIR)");
  s.dir = templ;
  bool synthetic = args.has("--synthetic");
  if (!synthetic) {
    try {
      load_recipe(args.recipe, args.overrides, size, true);
    } catch (const DataError& e) {
      synthetic = true;
      s.note = std::string("the recipe's data cannot be read (") + e.what() + "): random tokens instead";
    }
  }
  if (synthetic) s.data = write_synthetic_data(load_recipe(args.recipe, args.overrides, size, false), s.dir, steps);
  return s;
}

// The arguments of the `trainer train` run inside: the recipe, the user's
// overrides, then what makes it a smoke test.
std::vector<std::string> train_args(const RecipeArgs& args, const Scratch& s, long steps) {
  std::vector<std::string> a = {args.recipe};
  auto set = [&](const std::string& kv) { a.push_back("--set"), a.push_back(kv); };
  for (const std::string& o : args.overrides) set(o);
  set("run.dir=\"" + s.dir + "/run\"");
  set("checkpoint.dir=\"" + s.dir + "/checkpoints\"");
  set("checkpoint.every=0");
  set("checkpoint.resume=\"none\"");
  set("training.steps=" + std::to_string(steps));
  set("training.exit_after=0");
  set("training.log_every=1");
  set("training.eval_every=0");
  set("data.val=[]");
  set("metrics.tensorboard=false");
  if (!s.data.empty()) set("data.train=[\"" + s.data + "\"]");
  return a;
}

int run_inside(const std::vector<std::string>& a, int rank, int size) {
  std::vector<char*> argv;
  for (const std::string& s : a) argv.push_back(const_cast<char*>(s.c_str()));
  return train_job((int)argv.size(), argv.data(), rank, size);
}

// --check-restart: a first launch that saves at step k and stops, a second
// (launch 1 to faults, as under the supervisor) that resumes from that
// checkpoint to the end; both in their own scratch directories.
int restart_launches(const RecipeArgs& args, const Scratch& s, long steps, long k, int rank, int size) {
  std::vector<std::string> a = train_args(args, s, steps);
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
  const long steps = args.integer("--steps", 10, 1), warmup = args.integer("--warmup", 2, 0);
  if (args.has("--check-restart") && steps < 2)
    throw RecipeError("smoke --check-restart needs --steps >= 2: a save, then steps after it");
  if (warmup >= steps) throw RecipeError("smoke: --warmup " + std::to_string(warmup) + " leaves no step of --steps " +
                                         std::to_string(steps) + " to measure");
  Scratch s;
  int code = 0;
  if (rank == 0) {
    try {
      s = make_scratch(args, size, steps);
    } catch (const UserError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      code = e.exit_code;
    }
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (code) return code;
  s.dir = broadcast_string(s.dir), s.data = broadcast_string(s.data);
  if (rank == 0 && !s.note.empty()) std::fprintf(stderr, "smoke: %s\n", s.note.c_str());
  code = run_inside(train_args(args, s, steps), rank, size);
  const long k = std::max(1L, warmup);  // --check-restart saves after the warm-up steps
  if (code == 0 && args.has("--check-restart")) code = restart_launches(args, s, steps, k, rank, size);
  const SmokeRun run{s.dir + "/run", s.data.empty() ? "recipe" : "synthetic", (int)warmup, ranks_on_node()};
  if (code == 0 && rank == 0) {
    const Recipe ran = load_recipe(s.dir + "/run/recipe.resolved.toml", {}, 0, false);
    const Recipe user = load_recipe(args.recipe, args.overrides, size, false);
    nlohmann::json j = smoke_figures(args, run, ran, user);
    if (args.has("--check-restart")) {
      j["restart"] = compare_restart(run.run_dir, s.dir + "/restart_run", s.dir + "/restart_ckpt", k);
      const double ms = j["restart"]["save_blocking_ms"].is_number() ? j["restart"]["save_blocking_ms"].get<double>() : NAN;
      if (ms > 0)
        j["checkpoint"] = advice_json(ms / 1e3, "save measured here", user.checkpoint.mtbf_hours,
                                      j["measured"]["step_ms"].get<double>());
    }
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
