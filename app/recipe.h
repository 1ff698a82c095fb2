#pragma once
// The recipe: the typed, validated form of a TOML recipe plus command-line
// overrides. app/recipe.cpp is the only code that knows TOML; everything
// else takes these structs.
#include <cstdint>
#include <string>
#include <vector>

#include "app/fault.h"
#include "model/adamw.h"
#include "model/config.h"
#include "model/lr_schedule.h"
#include "model/recompute.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/process_grid.h"

namespace trainer {

struct RunSection {
  std::string name = "run";
  std::string dir = "runs/run";
  uint64_t seed = 1234;
};

struct DataSection {
  std::vector<std::string> train, val;           // as written (paths or globs)
  std::vector<std::string> train_files, val_files;  // expanded
  int prefetch = 2;
};

struct TrainingSection {
  long steps = 100;
  int global_batch = 8;
  int micro_batch = 1;
  float grad_clip = 1.0f;
  int eval_every = 0;  // 0: only at the end (if val data is given)
  int eval_batches = 4;
  int log_every = 1;
  long exit_after = 0;  // stop this run after that many steps (0: run to `steps`)
  // A NaN/Inf loss or gradient, or a loss spike: stop (exit 6), skip the
  // update, or reload the last checkpoint and skip the batches since it.
  enum class BadStep { Stop, Skip, Rollback } on_nan = BadStep::Stop;
  // A loss spike: a loss above spike_factor x the median of the last
  // spike_window applied steps (0: no spike check).
  double spike_factor = 0;
  int spike_window = 50;
  BadStep on_spike = BadStep::Skip;
};

struct RuntimeSection {
  int threads = 1;
  std::string backend = "cpu";
  double peak_gflops = 0;  // per rank; 0: measure sgemm at start-up
  double comm_timeout = 600;  // s a rank may sit in one collective (or idle) before the watchdog ends the job; 0: off
  double straggler_factor = 1.5;  // a rank whose compute time exceeds the median by this factor is named; 0: off
  int straggler_every = 10;       // steps between straggler reports
  bool memory_check = true;       // stop before allocating when the plan does not fit (app/memory_fit.h)
};

// `trainer supervise`: restarts and hang detection.
struct SupervisorSection {
  int max_restarts = 3;         // relaunches after a failure before giving up
  double hang_timeout = 900;    // s without a heartbeat (a finished step) before the job is killed; 0: off
  double backoff = 5;           // s before the first relaunch, doubling each time...
  double backoff_max = 60;      // ...up to this
};

// How `trainer supervise` starts the job (unless a command follows `--`).
struct LaunchSection {
  std::string launcher = "mpirun";  // "mpirun" or "srun"
  int ranks = 0;                    // 0: parallel.dp * pp * tp
  std::vector<std::string> args;    // extra launcher arguments, e.g. ["--oversubscribe"]
};

struct CheckpointSection {
  int every = 0;             // steps between saves; 0: no checkpoints
  std::string dir;           // default <run.dir>/checkpoints
  int keep = 3;              // newest committed checkpoints kept; 0: all
  std::string resume = "auto";  // "auto", "none" or a step directory
  bool required = false;     // a failed save stops training (else reported)
  bool async = false;        // write in the background from a host snapshot
  // Recipe keys ("data.train", "model.*", "run.seed") allowed to differ from
  // the checkpoint's recipe when resuming; others of those are refused.
  std::vector<std::string> allow_changes;
};

struct Recipe {
  std::string path;  // the recipe file
  RunSection run;
  ModelConfig model;
  DataSection data;
  TrainingSection training;
  LrConfig lr;
  AdamWConfig adamw;
  GridShape grid;
  bool sequence_parallel = false;  // [parallel] sequence_parallel (with tp > 1)
  ScheduleKind schedule = ScheduleKind::OneFOneB;  // [parallel] schedule (with pp > 1)
  int virtual_stages = 1;                          // [parallel] virtual_stages
  RecomputeConfig recompute;                       // [recompute] mode, layers
  CheckpointSection checkpoint;
  RuntimeSection runtime;
  SupervisorSection supervisor;
  LaunchSection launch;
  std::vector<std::string> fault_specs;  // [fault] inject, as written
  std::vector<Fault> faults;             // the same, parsed
  // What is legal but likely unintended (file:line: key: why), for rank 0 to
  // print; not part of the recipe.
  std::vector<std::string> warnings;

  int accum_steps() const { return training.global_batch / (training.micro_batch * grid.dp); }
};

// Reads path, applies overrides ("section.key=value"), validates everything
// that can be checked before training (including that data files exist) and
// returns the recipe. world_size fills parallel.dp when it is left out (0: no
// job yet, dp defaults to 1 and is not checked against a world size);
// need_data = false skips the data section's file checks (benchmarks).
// Throws RecipeError whose message names the file, line and key.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size, bool need_data);

// The resolved recipe as TOML text (what --print-config prints and
// recipe.resolved.toml holds); loading it again gives the same recipe.
std::string recipe_to_toml(const Recipe& r);

// What `trainer status` needs from a run's recipe.resolved.toml, read
// without validation (the data may have moved since). Missing keys keep
// these defaults; an unreadable file gives all defaults.
struct RunFacts {
  long steps = 0;            // training.steps (0: unknown)
  long checkpoint_every = -1;  // checkpoint.every (-1: unknown)
  std::string checkpoint_dir;  // checkpoint.dir, as written (relative to where the run was launched)
};
RunFacts read_run_facts(const std::string& resolved_recipe_path);

// Keys whose value differs between a recorded resolved recipe (a
// checkpoint's recipe.toml) and this one, as "section.key" with both values
// as TOML text ("(absent)" when one side lacks the key). Sections that only
// say how to run ([checkpoint], [supervisor], [launch], [fault]) and run.name
// and run.dir are not compared. Throws RecipeError if old_text is not TOML.
struct RecipeChange {
  std::string key, was, now;
};
std::vector<RecipeChange> recipe_changes(const std::string& old_text, const Recipe& now);

// "3.3.0": the TOML library's version, for `trainer --version`.
std::string toml_library_version();

// Levenshtein distance (for "did you mean").
int edit_distance(const std::string& a, const std::string& b);

}  // namespace trainer
