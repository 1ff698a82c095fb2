#pragma once
// The recipe: the typed, validated form of a TOML recipe plus command-line
// overrides. The engine and everything else take these structs; only app/
// reads TOML (app/recipe.cpp). The keys, their defaults and ranges are
// declared in recipe/recipe_keys.cpp, the rules between keys in
// recipe/recipe_rules.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "recipe/fault.h"
#include "model/adamw.h"
#include "model/config.h"
#include "model/lr_schedule.h"
#include "model/recompute.h"
#include "parallel/context_chunks.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/grid_shape.h"
#include "runtime/dtype.h"

namespace trainer {

// The recipe's sections. Their defaults, ranges and meaning are declared
// once, in recipe/recipe_keys.cpp; default_recipe() applies them. The members
// here start zeroed.
struct RunSection {
  std::string name{};
  std::string dir{};
  uint64_t seed{};
};

// One entry of data.train / data.val: a path or glob, or a table
// { path = "...", weight = 0.3, name = "web" } naming a blend source.
struct DataSource {
  std::string path;
  double weight = 0;  // 0: a plain entry (all plain entries form one source)
  std::string name;
  std::vector<std::string> files;  // expanded
  bool operator==(const DataSource& o) const { return path == o.path && weight == o.weight && name == o.name; }
};

struct DataSection {
  std::vector<DataSource> train, val;               // as written
  std::vector<std::string> train_files, val_files;  // expanded, all sources
  int prefetch{};
  // The tokenizer spec that made the data (data/tokenizer.h make_tokenizer;
  // "": not known): from data_info.json beside the shards when not given,
  // kept in every checkpoint's recipe, what `ckpt export` writes.
  std::string tokenizer{};
};

struct TrainingSection {
  long steps{};
  int global_batch{};
  int micro_batch{};
  // Compute type: fp32, or bf16 (fp32 master weights, gradients and
  // optimizer state; bf16 products, activations and gradient traffic).
  DType precision{};
  float grad_clip{};
  int eval_every{};  // 0: only at the end (if val data is given)
  int eval_batches{};
  int log_every{};
  long exit_after{};  // stop this run after that many steps (0: run to `steps`)
  // A NaN/Inf loss or gradient, or a loss spike: stop (exit 6), skip the
  // update, or reload the last checkpoint and skip the batches since it.
  enum class BadStep { Stop, Skip, Rollback };
  BadStep on_nan{};
  // A loss spike: a loss above spike_factor x the median of the last
  // spike_window applied steps (0: no spike check).
  double spike_factor{};
  int spike_window{};
  BadStep on_spike{};
};

// [parallel]: how the ranks split the model and the batch.
struct ParallelSection {
  static constexpr int kMaxZeroStage = 3;  // parallel.zero_stage's largest
  static constexpr int kMaxZeroPrefetch = 8;  // parallel.zero_prefetch's largest
  GridShape grid;            // dp, tp, pp, cp
  bool sequence_parallel{};  // activations sharded along the sequence between TP regions (tp > 1)
  ScheduleKind schedule{};   // the pipeline schedule (pp > 1)
  int virtual_stages{};      // model chunks per pipeline stage
  double dp_bucket_mb{};     // MB of gradients per data-parallel all-reduce bucket
  bool dp_overlap{};         // each bucket's all-reduce starts during the backward
  int zero_stage{};          // 1: AdamW's state sharded over data-parallel ranks (ZeRO-1); 2: the gradients too; 3: the weights too
  bool reshard_after_forward{};  // ZeRO-3: a layer's gathered weights dropped after its forward
  int zero_prefetch{};           // ZeRO-3: layers whose gathers travel while one computes
  long zero_persist_below{};     // ZeRO-3: a layer's vectors (each smaller than this) stay gathered for the step
  CpComm cp_comm{};          // context parallelism's attention: a ring, or an all-to-all to head shards
  bool cp_overlap{};         // ring attention: the next block travels while the one in hand is attended to
  // ZeRO (any stage) in effect: asked for, and more than one rank holding the same
  // weights (dp x cp) to shard over.
  bool zero_sharded() const { return zero_stage >= 1 && grid.weight_replicas() > 1; }
  // The ranks that hold one model copy and read the same sequences: tp * cp * pp.
  long model_ranks() const { return grid.model_ranks(); }
};

struct RuntimeSection {
  int threads{};
  std::string cpu_kernels{};  // CPU backend: "auto", "avx512", "avx2" or "generic" (runtime/cpu/cpu_kernels.h)
  std::string backend{};
  bool allow_tf32{};      // CUDA: fp32 GEMMs in TF32
  bool deterministic_attention{};  // CUDA: cuDNN's deterministic attention backward (a B x H x T^2 workspace)
  double peak_gflops{};  // per rank; 0: measure sgemm at start-up
  double comm_timeout{};  // s a rank may sit in one collective (or idle) before the watchdog ends the job; 0: off
  double straggler_factor{};  // a rank whose compute time exceeds the median by this factor is named; 0: off
  int straggler_every{};       // steps between straggler reports
  double throughput_drop{};    // report tokens/s held below this fraction of the early baseline; 0: off
  int throughput_window{};     // steps the baseline and the watched window span
  bool memory_check{};       // stop before allocating when the plan does not fit (planning/memory_fit.h)
};

// `trainer health`: how a node's figures are judged against the nodes' median.
struct HealthSection {
  bool check{};        // `trainer train` runs the check at start-up (exit 10 when a node is unfit)
  double min_ratio{};  // below this fraction of the median: slow
  bool in_turn{};      // nodes measure one after another (they share hardware)
};

// `trainer supervise`: restarts and hang detection.
struct SupervisorSection {
  int max_restarts{};         // relaunches after a failure before giving up
  double hang_timeout{};    // s without a heartbeat (a finished step) before the job is killed; 0: off
  double start_timeout{};   // s until a rank runs on each of a launch's hosts (with an allocation); 0: off
  double backoff{};           // s before the first relaunch, doubling each time...
  double backoff_max{};      // ...up to this
  std::string on_straggler{};  // "report", or "replace": a host named straggler_windows reports in a row is swapped for a spare
  int straggler_windows{};     // straggler reports in a row naming one host before "replace" acts
  bool elastic{};              // no spare left: go on with fewer data-parallel replicas (planning/shrink.h)
  double spare_wait{};         // no spare left (not elastic): s to wait for excluded hosts to come back; 0: exit 7 at once
  double spare_check_every{};  // s between health checks of the excluded hosts while waiting
  bool readmit{};              // an excluded host that passes the health check again returns (between launches only)
  // s to wait before the relaunch after `restarts` earlier ones.
  double backoff_before(int restarts) const { return std::min(backoff * std::pow(2.0, restarts), backoff_max); }
};

// How `trainer supervise` starts the job (unless a command follows `--`).
struct LaunchSection {
  std::string launcher{};  // "mpirun" or "srun"
  int ranks{};                    // 0: parallel.dp * pp * tp * cp
  std::vector<std::string> args;    // extra launcher arguments, e.g. ["--oversubscribe"]
  std::vector<std::string> hosts;   // the allocation under mpirun (supervise/allocation.h)
  std::string hostfile;             // or a file of them
  int nodes{};                      // hosts each launch runs on (0: all); the rest are spares
};

// checkpoint.every = "auto": the interval follows the measured save time
// (engine/checkpoint_interval.h).
constexpr int kCheckpointEveryAuto = -1;

struct CheckpointSection {
  int every{};             // steps between saves; 0: no checkpoints; kCheckpointEveryAuto
  double mtbf_hours{};     // mean time between failures, for the automatic interval
  bool saves() const { return every != 0; }
  bool automatic() const { return every == kCheckpointEveryAuto; }
  std::string dir;           // default <run.dir>/checkpoints
  int keep{};              // newest committed checkpoints kept; 0: all
  std::string resume{};  // "auto", "none" or a step directory
  bool required{};     // a failed save stops training (else reported)
  bool async{};        // write in the background from a host snapshot
  // Recipe keys ("data.train", "model.*", "run.seed") allowed to differ from
  // the checkpoint's recipe when resuming; others of those are refused.
  std::vector<std::string> allow_changes;
  std::string init_from;  // a Hugging Face model directory to start from ("": none)
};

struct MetricsSection {
  bool tensorboard{};
  std::string tensorboard_dir;
};

// Where each key's value came from, so a message names the line to fix:
// the keys the file or --set gave (the others take their defaults, derived
// from these), which of them --set gave, and the file's line of each key and
// section ("recipe.toml:12"). The reader (app/recipe.cpp) fills it; a typed
// edit (a layout `plan --search` tries) marks what it set as --set does.
struct RecipeOrigin {
  std::string file;
  std::set<std::string> given;       // "section.key"
  std::set<std::string> overridden;  // "section.key" given by --set
  std::map<std::string, std::string> lines;  // "section.key" or "[section]" -> "file:line"
  // "--set section.key", "file:line" of the key, else of its section, else the file.
  std::string where(const std::string& section, const std::string& key) const;
  // A problem with a key as every recipe message reads: "where: [section] key: why".
  std::string problem(const std::string& section, const std::string& key, const std::string& why) const {
    return where(section, key) + ": [" + section + "] " + key + ": " + why;
  }
  bool is_given(const std::string& section, const std::string& key) const { return given.count(section + "." + key) > 0; }
  bool is_overridden(const std::string& section, const std::string& key) const {
    return overridden.count(section + "." + key) > 0;
  }
};

struct Recipe {
  std::string path;  // the recipe file
  RecipeOrigin origin;
  RunSection run;
  MetricsSection metrics;
  ModelConfig model;
  DataSection data;
  TrainingSection training;
  LrConfig lr;
  AdamWConfig adamw;
  ParallelSection parallel;
  RecomputeConfig recompute;                       // [recompute] mode, layers
  CheckpointSection checkpoint;
  RuntimeSection runtime;
  SupervisorSection supervisor;
  LaunchSection launch;
  HealthSection health;
  std::vector<std::string> fault_specs;  // [fault] inject, as written
  std::vector<Fault> faults;             // the same, parsed
  // What is legal but likely unintended (file:line: key: why), for rank 0 to
  // print; not part of the recipe.
  std::vector<std::string> warnings;

  // What [parallel] and [training] make of each other, derived here only:
  // the micro-batches each rank runs per optimizer step (gradient
  // accumulation), and the pipeline the schedule is built from (its stages,
  // chunks per stage, those micro-batches and the schedule).
  int accum_steps() const;
  PipelineSpec pipeline() const;
  // The layout as a run's first line says it: "dp=2 pp=2 tp=2 (sequence
  // parallel) 1f1b", then " cp=2 (ring attention)" (or a2a) where sequences are cut;
  // sequence parallelism only where tp splits rows, the schedule only
  // where there are stages ("interleaved x2": its chunks per stage), the
  // attention the cp group runs. Every text that names a run's layout
  // (smoke, the report) uses it.
  std::string layout_summary() const;
  // Tokens one optimizer step trains on, all ranks together.
  double tokens_per_step() const { return (double)training.global_batch * model.seq_len; }
  // The most micro-batches a step may take (the pipeline schedule lists each
  // one), and the most tokens in one micro-batch (int32 indexes its tensors).
  static constexpr long kMaxAccumSteps = 1048576, kMaxMicroBatchTokens = 2147483647;
};

}  // namespace trainer
