#pragma once
// What one rank holds of a model, in one struct that both the model is built
// from (model/transformer.h) and its memory is planned from
// (model/memory_plan.h): the micro-batch, the parallel sizes, the compute
// type and the model chunks with the micro-batches each keeps in flight.
// engine/layout.h makes it from a recipe; tools and tests that run one
// process use single_rank_layout.
#include <vector>

#include "model/param_registry.h"
#include "parallel/grid_shape.h"
#include "parallel/context_chunks.h"
#include "runtime/dtype.h"

namespace trainer {

struct ChunkLayout {
  ChunkSpec spec;  // layers, embedding, head (last_layer resolved)
  int slots = 1;   // micro-batches in flight for this chunk
  auto operator<=>(const ChunkLayout&) const = default;
};

// The grid's sizes (parallel/grid_shape.h) are the job's: a rank holds
// GridShape::sequence_share of each sequence's tokens.
struct RankLayout : GridShape {
  int micro_batch = 1, micro_batches = 1, threads = 1;
  CpComm cp_comm = CpComm::Ring;  // its attention: a ring or an all-to-all (parallel/context_attention.h)
  bool cp_overlap = true;  // the ring's transfers overlap its attention (parallel/ring_attention.h)
  int zero_stage = 0;  // 1: AdamW's state sharded over the weight replicas; 2: the gradients too; 3: the weights too
  // ZeRO-3: a layer's gathered weights are dropped after its forward and
  // gathered again for its backward (false: kept for the step).
  bool reshard_after_forward = true;
  int zero_prefetch = 1;  // ZeRO-3: the pass's next layers gathered while one computes
  long zero_persist_below = 0;  // ZeRO-3: a layer's vectors smaller than this stay gathered (0: none)
  bool sequence_parallel = false, pipelined = false;
  DType compute = DType::F32;  // training.precision: activations, messages, the weights products read
  std::vector<ChunkLayout> chunks;
  // runtime.backend = "cuda": what only that backend holds is planned too
  // (MemoryPlan::cuda); with deterministic_attention cuDNN's backward keeps
  // a workspace quadratic in T.
  bool cuda = false, deterministic_attention = true;
  auto operator<=>(const RankLayout&) const = default;
  // ZeRO-2: no rank keeps a whole gradient buffer (model/param_units.h);
  // ZeRO-3: nor whole weights.
  bool grads_sharded() const { return zero_stage >= 2 && weight_replicas() > 1; }
  bool weights_sharded() const { return zero_stage >= 3 && weight_replicas() > 1; }
  // model/param_units.h's threshold: ZeRO-3's, where weights are sharded.
  size_t persist_below() const { return weights_sharded() ? (size_t)zero_persist_below : 0; }
};

// One process holding the whole model: no parallelism, one chunk, one
// micro-batch in flight.
inline RankLayout single_rank_layout(int micro_batch, DType compute = DType::F32) {
  RankLayout l;
  l.micro_batch = micro_batch, l.compute = compute;
  l.chunks = {ChunkLayout{}};
  return l;
}

}  // namespace trainer
