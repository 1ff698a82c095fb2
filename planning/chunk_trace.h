#pragma once
// What one model chunk issues for one micro-batch on one rank of a layout:
// the backend ops of its forward and its backward (recomputation included)
// and its tensor-parallel collectives, found by running the real model code
// on a MeteredBackend (planning/op_meter.h) with communicators that only
// record (planning/null_comm.h), as rank 0 of its groups. With a real backend behind the meter the
// same run measures each op (`trainer calibrate`).
#include <vector>

#include "model/config.h"
#include "model/param_registry.h"
#include "model/rank_layout.h"
#include "model/recompute.h"
#include "planning/null_comm.h"
#include "planning/op_meter.h"
#include "recipe/recipe.h"

namespace trainer {

// A rank's shard of the model: what decides the shapes it computes and the
// calls it makes. Its layout (model/rank_layout.h) with what does not at the
// defaults (shard_shape_of: the dimensions that do not split a layer, the
// chunks, the schedule, the optimizer's sharding, the backend's options),
// and what it recomputes. Shapes that compute alike compare equal
// (calibrate times each once).
struct ShardShape {
  RankLayout layout;
  RecomputeConfig recompute;
  auto operator<=>(const ShardShape&) const = default;
};

ShardShape shard_shape_of(const RankLayout& l, RecomputeConfig recompute);
// A recipe's layout's, recomputing as the recipe says.
ShardShape shard_shape_of(const Recipe& r);

struct ChunkTrace {
  std::vector<OpCall> ops;        // forward, then backward, `reps` times; then once-per-step work
  std::vector<CommCall> tp_comm;  // the tensor-parallel group's calls, the same order
  std::vector<CommCall> cp_comm;  // the context-parallel group's, with the ops they overlap (started, waited)
  size_t params = 0;              // this rank's parameters of the chunk
  size_t boundary_elems = 0;      // the activation a chunk passes on, in the compute type
};

// inner: null to trace only; else ops run (and are timed) there, a warm-up
// pass first, then `reps` recorded passes.
ChunkTrace trace_chunk(const ModelConfig& c, const ChunkSpec& chunk, const ShardShape& s, Backend* inner = nullptr,
                       int reps = 1);

}  // namespace trainer
