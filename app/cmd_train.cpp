// `trainer train RECIPE.toml`: one rank of a (data-parallel) training job.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/environment.h"
#include "planning/health_check.h"
#include "parallel/mpi_command.h"
#include "planning/memory_fit.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "recipe/recipe_keys.h"
#include "app/resume.h"
#include "engine/job.h"
#include "engine/step_loop.h"
#include "runtime/errors.h"
#include "runtime/host_name.h"
#include "runtime/metrics.h"
#include "runtime/replace_file.h"
#include "runtime/stop_signal.h"
#include "parallel/mpi_world.h"

namespace trainer {

namespace {

const char* kTrainUsage =
    "usage: [mpirun -np N] trainer train RECIPE.toml [--set section.key=value ...]\n"
    "                                   [--resume PATH] [--start-over] [--print-config]\n"
    "       trainer train --keys | --keys-markdown\n"
    "  --set K=V        override a recipe key, e.g. --set training.steps=50 (repeatable;\n"
    "                   also --set=K=V, or --training.steps 50 as torchtitan spells it)\n"
    "  --resume PATH    resume from a checkpoint: a step directory, a checkpoint directory\n"
    "                   (its newest), its `latest` file; or auto (default) / none\n"
    "  --start-over     train from step 0 although [checkpoint] dir holds checkpoints: they\n"
    "                   are moved to <dir>/previous/<time>/ (nothing is deleted)\n"
    "  --print-config   print the resolved recipe, with notes on what would stop a launch,\n"
    "                   and exit (no mpirun or data needed)\n"
    "  --keys           every recipe key: default, allowed values, meaning\n"
    "Writes <run.dir>/metrics.jsonl and <run.dir>/recipe.resolved.toml.\n";

const RecipeArgsSpec kTrainArgs = {"train", kTrainUsage, {"--print-config", "--start-over", "--keys", "--keys-markdown"},
                                   {"--resume"}, false, false, {"--keys", "--keys-markdown"}};

RecipeArgs parse_args(int argc, char** argv) {
  RecipeArgs a = parse_recipe_args(kTrainArgs, argc, argv);
  if (a.has("--resume")) a.overrides.push_back("checkpoint.resume=" + toml_text(a.options["--resume"], KeyType::String));
  return a;
}

// --print-config, --keys and --help: no MPI, no data, no files written.
// A recipe error still fails (exit 2); what would stop a launch later (data
// files, the world size) is printed as a note.
int describe_only(const RecipeArgs& args) {
  if (args.help) return std::fputs(kTrainUsage, stdout), kExitOk;
  if (args.has("--keys") || args.has("--keys-markdown"))
    return std::fputs(describe_keys(args.has("--keys-markdown")).c_str(), stdout), kExitOk;
  const Recipe r = load_recipe(args.recipe, args.overrides, 0, false);
  std::fputs(recipe_to_toml(r).c_str(), stdout);
  for (const std::string& w : r.warnings) std::printf("# warning: %s\n", w.c_str());
  try {
    load_recipe(args.recipe, args.overrides, 0, true);
  } catch (const UserError& e) {
    std::printf("# note: a launch would stop here (exit %d): %s\n", e.exit_code, e.what());
  }
  std::printf("# launch: mpirun -np %ld (%s)\n", r.parallel.grid.ranks(), grid_sizes(r.parallel.grid).c_str());
  return kExitOk;
}

// Every rank: the recipe with the command line, the supervisor's resume
// request and TRAINER_FAULT applied; rank 0 prints its warnings.
void load_job_recipe(Job& job, RecipeArgs& args, int argc, char** argv, int rank, int size, int launch) {
  args = parse_args(argc, argv);
  // Set by `trainer supervise`: every launch resumes from the newest valid checkpoint.
  if (const char* resume = std::getenv("TRAINER_RESUME"))
    args.overrides.push_back(std::string("checkpoint.resume=\"") + resume + "\"");
  job.recipe = load_recipe(args.recipe, args.overrides, size, true);
  if (const char* spec = std::getenv("TRAINER_FAULT"))
    for (Fault& f : parse_faults(spec, "TRAINER_FAULT")) job.recipe.faults.push_back(std::move(f));
  job.faults = FaultPlan(job.recipe.faults, rank, launch);
  job.recipe_text = recipe_to_toml(job.recipe);
  job.local_rank = launcher_local_rank(), job.peak_cache_file = peak_cache_file(), job.tokenizer_dir = tokenizer_dir();
  if (rank == 0)
    for (const std::string& w : job.recipe.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
}

// Rank 0 takes the run's directories and decides where training starts.
void take_run_dirs(Job& job, RunDirLocks& locks, bool start_over) {
  const Recipe& r = job.recipe;
  ensure_run_dirs(r);
  const char* token = std::getenv("TRAINER_LOCK_TOKEN");  // set by `trainer supervise`
  lock_run_dirs(r, locks, token ? token : "");
  const ResumeDecision d = decide_resume(r, start_over);
  for (const std::string& n : d.notes) std::fprintf(stderr, "%s\n", n.c_str());
  job.resumed_from = d.from;
  // Until the first step (run_step_loop says what a stop saves from then on).
  set_stop_note("trainer: stop signal received during set-up: the ranks stop at set-up's next step and exit 75; "
                "nothing is trained yet, so there is nothing to save" +
                (d.from.empty() ? std::string(".\n") : ", and the checkpoint resumed from, " + d.from + ", is intact.\n"));
}

// The memory pre-flight, before anything big is allocated.
void check_fit(const Recipe& r, int rank, int node_ranks, int local_rank) {
  if (!r.runtime.memory_check) return;
  const GridCoords at = grid_coords(r.parallel.grid, rank);
  const MemoryFit fit = check_memory_fit(r, at.pp, first_in(at, kWeightReplicaDims), node_ranks, local_rank);
  if (!fit.fits)
    throw RecipeError("rank " + std::to_string(rank) + " (pipeline stage " + std::to_string(at.pp) + ") " +
                      fit.message + " (runtime.memory_check = false skips this check)");
}

// health.check: every node's figures against the others' (trainer health)
// before the first step; an unfit node stops the job with kExitUnfitNode.
void check_health(const Job& job, int rank, int size) {
  const Recipe& r = job.recipe;
  if (!r.health.check) return;
  const std::string unfit = check_nodes(r, *job.backend, job.probe.get(), job.node_ranks, rank, size, job.launch);
  if (unfit.empty()) return;
  throw UserError(kExitUnfitNode, "health.check: not training on an unfit node: " + unfit +
                                      " (take the node out of the job, or health.check = false to train anyway)");
}

// A setup_fail fault (recipe/fault.h) for this rank at this step.
void inject_setup_failure(const Job& job, const char* step, int rank) {
  for (const Fault* f : job.faults.at(Fault::SetupFail, 0))
    if (f->point == step)
      throw RecipeError("injected fault \"" + f->text + "\": rank " + std::to_string(rank) + " fails set-up step " +
                        step + " at its end, the other ranks going on");
}

// Set-up as one agreed step after another (engine/job.h SetupStep): the
// first failure, on any rank, ends it with one message and one exit code on
// every rank, before any rank enters the next step's collectives.
int set_up(Job& job, RunDirLocks& locks, int argc, char** argv, int rank, int size, int launch) {
  RecipeArgs args;
  int code = agree_on_failure(MPI_COMM_WORLD, [&] { load_job_recipe(job, args, argc, argv, rank, size, launch); });
  if (code) return code;
  std::vector<SetupStep> steps = {
      {"run_dirs",
       [&] {
         if (rank == 0) take_run_dirs(job, locks, args.has("--start-over"));
       }},
      {"memory",
       [&] {
         job.resumed_from = broadcast_string(job.resumed_from);  // collectives first
         job.node_ranks = ranks_on_node();
         check_fit(job.recipe, rank, job.node_ranks, job.local_rank);
         // The resolved recipe is for people and `trainer status` (a checkpoint
         // keeps its own): a failure to write it is a warning. replace_file also
         // replaces a FIFO left in its place, which an open would block on.
         if (rank == 0)
           if (const std::string err =
                   replace_file(job.recipe.run.dir + "/recipe.resolved.toml", job.recipe_text, false);
               !err.empty())
             std::fprintf(stderr, "warning: %s; the run goes on without it\n", err.c_str());
       }},
  };
  for (SetupStep& s : job_setup_steps(job, rank, launch)) steps.push_back(std::move(s));
  steps.push_back({"health", [&] { check_health(job, rank, size); }});
  if (steps.size() != std::size(kSetupSteps) ||
      !std::equal(steps.begin(), steps.end(), std::begin(kSetupSteps),
                  [](const SetupStep& s, const char* name) { return !std::strcmp(s.name, name); }))
    throw std::logic_error("the set-up steps are not kSetupSteps (recipe/fault.h)");
  for (size_t i = 0; i < steps.size(); i++) {
    code = agree_on_failure(MPI_COMM_WORLD, [&] {
      steps[i].run();
      inject_setup_failure(job, steps[i].name, rank);  // as a failure in what the step does last
    });
    if (code) return code;
  }
  return 0;
}

// For `trainer supervise` (TRAINER_START_MARKS): each host's first rank
// leaves a file named for its host before MPI_Init, which waits for every
// host: a host without one after supervisor.start_timeout never started.
void mark_started() {
  const std::string dir = start_marks_dir();
  if (dir.empty() || launcher_local_rank() > 0) return;
  const std::string path = dir + "/" + host_name();
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%d\n", (int)getpid());
    if (std::fclose(f) == 0) return;
  }
  std::fprintf(stderr, "warning: cannot write %s (%s): `trainer supervise` will take this host for one whose ranks "
               "never started\n", path.c_str(), std::strerror(errno));
}

}  // namespace

int cmd_train(int argc, char** argv) {
  for (int i = 0; i < argc; i++)
    for (const char* f : {"--print-config", "--keys", "--keys-markdown", "--help", "-h"})
      if (!std::strcmp(argv[i], f)) return describe_only(parse_args(argc, argv));
  // From here on SIGTERM/SIGUSR1/SIGINT mean "checkpoint and stop", and
  // SIGUSR2 "write your flight recorder": taken before MPI_Init (which can
  // take a second), so that a stop sent while MPI comes up ends set-up with
  // the requeue code instead of killing the process (exit 138).
  install_stop_signals(true);
  install_dump_signal();
  mark_started();
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int code = train_job(argc, argv, rank, size);
  MPI_Finalize();
  return code;
}

int train_job(int argc, char** argv, int rank, int size) {
  const int launch = std::max(0, supervisor_launch());  // 0 unsupervised
  Job job;
  RunDirLocks locks;  // rank 0: this run owns run.dir and checkpoint.dir
  int code = set_up(job, locks, argc, argv, rank, size, launch);
  if (code == 0) {
    job.locks = {&locks.run, &locks.ckpt};
    start_watchdog(job, rank);
    code = run_step_loop(job);
  }
  job.release();  // free communicators (and stop the watchdog) while MPI is up
  return code;
}

}  // namespace trainer
