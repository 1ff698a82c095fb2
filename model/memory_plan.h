#pragma once
// Predicted memory of one rank, by category, from the model shape and layout
// alone (formulas written from what each layer keeps, not by running the
// allocation code), and the extra forward FLOPs a recompute mode costs.
// `trainer plan` prints it; a test holds the measured peaks to it.
#include <vector>

#include "model/config.h"
#include "model/param_registry.h"
#include "model/rank_layout.h"
#include "model/recompute.h"
#include "runtime/dtype.h"
#include "runtime/memory.h"

namespace trainer {

// What only the CUDA backend holds (runtime/cuda_memory.h): zero elsewhere.
struct CudaMemory {
  double attention_workspace = 0;  // cuDNN's bf16 backward (deterministic: B x H x T^2 fp32)
  double attention_rows = 0;       // per-row statistics in cuDNN's form, fp32
  double attention_block = 0;      // ring attention's chunk pair out of cuDNN (bf16 packed gradient)
  double logits_grad_bf16 = 0;     // the LM head's fp32 logits gradient rounded for its products
  double rope_table = 0;           // RoPE's cos/sin table (Llama)
  double gemm_workspace = 0;       // cuBLASLt
  double nccl_buffers = 0;         // an estimate per NCCL communicator
  double allocator_reserve = 0;    // superseded scratch blocks the caching allocator keeps
  double total() const;
};

struct MemoryPlan {
  double bytes[kMemKinds] = {};
  CudaMemory cuda;
  double total() const;  // every category and the CUDA backend's own
};

MemoryPlan plan_memory(const ModelConfig& c, const RankLayout& l, const RecomputeConfig& rc);

// Extra forward FLOPs per optimizer step for this rank's chunks (recomputed
// products only; elementwise work is not counted), and the model FLOPs per
// step they add to.
double recompute_extra_flops(const ModelConfig& c, const RankLayout& l, const RecomputeConfig& rc);

}  // namespace trainer
