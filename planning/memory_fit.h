#pragma once
// The memory pre-flight: before a run allocates anything, each rank compares
// what `trainer plan` predicts for it (model/memory_plan.h, plus the
// checkpoint buffers and the process itself) with its share of the memory it
// can get (runtime/host_memory.h, divided among the ranks on the node). A
// run that cannot fit stops with exit 2 and says what would make it fit,
// instead of being killed by the OOM killer with no word.
#include <string>

#include "recipe/recipe.h"
#include "model/memory_plan.h"

namespace trainer {

struct MemoryFit {
  MemoryPlan plan;         // the stage checked
  double checkpoint = 0;   // bytes of checkpoint buffers (file image, async snapshot)
  double process = 0;      // the process itself: libraries, MPI buffers
  double need = 0;         // all of it, per rank
  double available = 0;    // this rank's share
  bool fits = true;
  std::string message;     // "needs 2.40 GB per rank (params ...), 0.90 GB available (...): try ..."
};

// stage < 0: the stage that needs most; writer: the rank writes checkpoint
// files; local_rank: on a GPU, the device whose memory is compared (the
// launcher's index of the rank on its node; -1: device 0).
MemoryFit check_memory_fit(const Recipe& r, int stage, bool writer, int ranks_on_node, int local_rank = -1);

// The same need against a given amount per rank (GPU memory on a GPU
// backend) instead of this machine's: a cluster's nodes planned from
// elsewhere (`trainer plan --memory-per-rank-gb`).
MemoryFit check_memory_within(const Recipe& r, int stage, bool writer, double per_rank_bytes);

// The bytes of the largest checkpoint file one rank writes (its stage's fp32
// master weights and AdamW m and v, its ZeRO-1 part under ZeRO-1): what a
// disk must take per writing rank. 0 when the run saves no checkpoints.
double checkpoint_file_bytes(const Recipe& r);

// A job's verdict, its worst stage on a checkpoint-writing rank:
// check_memory_within when per_rank_bytes > 0, else check_memory_fit with
// ranks_on_node ranks on this machine.
MemoryFit check_job_memory(const Recipe& r, int ranks_on_node, double per_rank_bytes);

}  // namespace trainer
