#pragma once
// Attention in bf16 through the cuDNN frontend's fused SDPA forward and
// backward, on the packed q|k|v rows the model keeps ([B*T, row]: q heads,
// then k heads, then v heads; GQA by fewer k/v heads): a whole causal
// sequence, or one chunk pair of ring attention (runtime/backend.h
// AttentionPair: the pair's query rows against a block's keys, causal on the
// diagonal, whole otherwise). Graphs are built once per geometry and cached.
// The backward uses cuDNN's deterministic algorithm unless told otherwise
// (runtime.deterministic_attention). This header stays free
// of cuDNN-frontend types: the frontend is compiled in one translation unit
// (cudnn_sdpa.cpp) because it is costly.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace trainer::cuda {

// What identifies a graph: every dimension and stride of its tensors, the
// mask and the direction. Exposed for tests.
struct SdpaKey {
  std::vector<int64_t> fields;
  bool operator<(const SdpaKey& o) const { return fields < o.fields; }
};
SdpaKey sdpa_key(const AttentionShape& s, bool backward);
SdpaKey sdpa_key(const AttentionShape& s, const AttentionPair& p, bool backward);

// Device memory the attention needs beyond its inputs and outputs: bytes ->
// a buffer valid until the next call.
using SdpaWorkspace = std::function<void*(size_t)>;

class CudnnSdpa {
 public:
  // deterministic: the backward's deterministic algorithm (bitwise reruns; its
  // workspace is B x H x T^2 fp32, runtime/cuda_memory.h).
  explicit CudnnSdpa(bool deterministic = true);
  ~CudnnSdpa();
  // out [B*T, H*hd] bf16; lse [B*H*T] fp32 (log-sum-exp per query row).
  void forward(cudaStream_t s, void* out, float* lse, const void* qkv, const AttentionShape& sh, const SdpaWorkspace& ws);
  // dqkv [B*T, row] bf16 (overwritten) from dout, out and lse of the forward.
  void backward(cudaStream_t s, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                const AttentionShape& sh, const SdpaWorkspace& ws);

  // One ring pair: the query rows [q0, q0 + rows) of qkv against the rows
  // [k0, k0 + rows) of the block kv. out_blk [B*rows, H*hd] bf16 is the
  // output over this block's keys alone, lse_blk [B*H*rows] its log-sum-exp
  // (the merge kernel folds both into the running output).
  void pair_forward(cudaStream_t s, void* out_blk, float* lse_blk, const void* qkv, const void* kv,
                    const AttentionShape& sh, const AttentionPair& p, const SdpaWorkspace& ws);
  // The pair's gradients in dqkv_blk [B*rows, row] bf16 (overwritten): dQ of
  // the query rows, then dK and dV of the block's rows, from the whole
  // attention's dout and out (the full [B*T, H*hd]) and the final
  // log-sum-exp of the pair's query rows, lse [B*H*rows].
  void pair_backward(cudaStream_t s, void* dqkv_blk, const void* dout, const void* qkv, const void* kv,
                     const void* out, const float* lse, const AttentionShape& sh, const AttentionPair& p,
                     const SdpaWorkspace& ws);
  static std::string version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer::cuda
