#pragma once
// One rank's training job: what `trainer train` builds before its first step
// (app/cmd_train.cpp decides where the run starts and sets it up; the step
// loop, engine/step_loop.h, runs it; parallel/mpi_world.h has the job-wide
// MPI helpers both use).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/blend.h"
#include "data/dataset.h"
#include "recipe/fault.h"
#include "recipe/recipe.h"
#include "engine/rank_step.h"
#include "parallel/process_grid.h"
#include "runtime/backend.h"
#include "runtime/flight_recorder.h"
#include "runtime/run_lock.h"
#include "runtime/metrics.h"
#include "runtime/peer_probe.h"
#include "runtime/watchdog.h"

namespace trainer {

struct Job {
  Recipe recipe;
  std::string recipe_text;  // the resolved recipe (TOML), stored with every checkpoint
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Backend> backend;
  std::vector<std::unique_ptr<TokenDataset>> datasets;  // what train and val read
  Blend train, val;  // val: no sources without validation data
  std::unique_ptr<RankStep> rank_step;
  std::unique_ptr<MetricsLog> metrics;       // rank 0
  std::unique_ptr<FlightRecorder> recorder;  // every communication call of this rank
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<PeerProbe> probe;  // multi-rank jobs: who can still be reached when the watchdog fires
  FaultPlan faults;          // injected faults for this rank and launch
  int launch = 0;            // the supervisor's launch number (TRAINER_ATTEMPT), 0 without one
  double peak_gflops = 0;    // per rank
  std::string peak_source;   // where it came from, for the run header
  // From the caller (app/environment.h): the launcher's index of this rank on
  // its node (the GPU it takes; -1: a single process), the sgemm peak cache
  // (runtime/peak_cache.h; "": none), and where gpt2 and llama3 tokenizers
  // look first (data/tokenizer.h; "": their usual places).
  int local_rank = -1;
  int node_ranks = 1;  // ranks of this job on this node (set by set-up's "memory" step)
  std::string peak_cache_file;
  std::string tokenizer_dir;
  std::string peak_cache_key;   // set when the peak came from (or went into) the cache
  std::string resumed_from;  // checkpoint step directory, or empty
  long resumed_step = -1;
  std::vector<const RunLock*> locks;  // rank 0: the run's directory locks, checked before each heartbeat

  // Users of the backend and communicators go first.
  void release();
};

// Set-up as steps, run in order on every rank. A step either works on this
// rank alone (and may fail on some ranks only) or begins with collectives
// that every rank reaches, with nothing that can fail on one rank alone
// before its last collective. The caller agrees on failure between steps
// (app/cmd_train.cpp), so a rank that fails never leaves the others waiting
// in a collective it will not enter. Each step's name is one of
// kSetupSteps (recipe/fault.h), which a setup_fail fault names.
struct SetupStep {
  const char* name;
  std::function<void()> run;
};
// The job's own steps: data, backend, process grid and flight recorder,
// model and optimizer, the resumed or imported weights, the sgemm peak, rank
// 0's metrics log. job.recipe, recipe_text, faults and resumed_from are set
// by the caller (resumed_from before the steps run). Each throws UserError.
std::vector<SetupStep> job_setup_steps(Job& job, int world_rank, int launch);
// Starts the watchdog over the flight recorder (after set-up, which makes no
// recorded calls).
void start_watchdog(Job& job, int world_rank);

// What rank 0 says the moment a stop signal arrives (runtime/stop_signal.h).
void note_newest_checkpoint(const std::string& newest);

}  // namespace trainer
