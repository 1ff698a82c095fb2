#pragma once
// Causal attention in bf16 through the cuDNN frontend's fused SDPA forward
// and backward, on the packed q|k|v rows the model keeps ([B*T, row]: q
// heads, then k heads, then v heads; GQA by fewer k/v heads). Graphs are
// built once per shape and cached. The backward uses cuDNN's deterministic
// algorithm. This header stays free of cuDNN-frontend types: the frontend is
// compiled in one translation unit (cudnn_sdpa.cpp) because it is costly.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/backend.h"

namespace trainer::cuda {

// What identifies a graph: shape, direction. Exposed for tests.
struct SdpaKey {
  int B, T, H, KVH, hd, row;
  bool backward;
  bool operator<(const SdpaKey& o) const;
};
SdpaKey sdpa_key(const AttentionShape& s, bool backward);

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
  static std::string version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer::cuda
