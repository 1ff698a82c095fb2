#pragma once
// Predicted memory of one rank, by category, from the model shape and layout
// alone (formulas written from what each layer keeps, not by running the
// allocation code), and the extra forward FLOPs a recompute mode costs.
// `trainer plan` prints it; a test holds the measured peaks to it.
#include <vector>

#include "model/config.h"
#include "model/param_registry.h"
#include "model/recompute.h"
#include "runtime/dtype.h"
#include "runtime/memory.h"

namespace trainer {

struct ChunkLayout {
  ChunkSpec spec;  // layers, embedding, head (last_layer resolved)
  int slots = 1;   // micro-batches in flight for this chunk
};

struct RankLayout {
  int micro_batch = 1, tp = 1, dp = 1, micro_batches = 1, threads = 1;
  int zero_stage = 0;  // 1: AdamW's state sharded over the dp ranks
  bool sequence_parallel = false, pipelined = false;
  DType compute = DType::F32;  // training.precision: activations, messages, the weights products read
  std::vector<ChunkLayout> chunks;
};

struct MemoryPlan {
  double bytes[kMemKinds] = {};
  double total() const;
};

MemoryPlan plan_memory(const ModelConfig& c, const RankLayout& l, const RecomputeConfig& rc);

// Extra forward FLOPs per optimizer step for this rank's chunks (recomputed
// products only; elementwise work is not counted), and the model FLOPs per
// step they add to.
double recompute_extra_flops(const ModelConfig& c, const RankLayout& l, const RecomputeConfig& rc);

}  // namespace trainer
