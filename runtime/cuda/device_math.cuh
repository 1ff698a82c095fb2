#pragma once
// Device helpers shared by the CUDA kernels: typed loads and stores (every
// kernel computes in fp32; a bf16 element is widened on load and rounded to
// nearest even once on store, as the CPU backend does), launch sizes, the
// dtype dispatch, and warp reductions in a fixed shuffle order (so a sum
// does not depend on timing: the same inputs give the same bits).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "runtime/tensor_ref.h"

namespace trainer::cuda {

__device__ __forceinline__ float ld(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__nv_bfloat16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <class T>
T* as(Ref r) { return static_cast<T*>(r.p); }
template <class T>
const T* as(CRef r) { return static_cast<const T*>(r.p); }

// Runs `body` with T the element type of `dt` (fp32 or bf16).
#define TRAINER_DISPATCH(dt, T, ...)              \
  do {                                            \
    if ((dt) == ::trainer::DType::BF16) {         \
      using T = __nv_bfloat16;                    \
      __VA_ARGS__;                                \
    } else {                                      \
      using T = float;                            \
      __VA_ARGS__;                                \
    }                                             \
  } while (0)

// After every launch (tests/cuda_cpu/rewrite_cuda.py refuses a launch
// without one) and every runtime or CUB call: a failure (a bad launch
// configuration, no kernel image for this GPU, the sticky fault of an
// earlier kernel) throws, naming the operation and its sizes, instead of
// surfacing later at an unrelated call.
inline void check_result(cudaError_t e, const char* op, std::initializer_list<size_t> sizes) {
  if (e == cudaSuccess) return;
  std::string shape;
  for (size_t v : sizes) shape += (shape.empty() ? "" : " x ") + std::to_string(v);
  throw std::runtime_error(std::string("CUDA kernel ") + op + " [" + shape + "]: " + cudaGetErrorString(e));
}
inline void check_launch(const char* op, std::initializer_list<size_t> sizes) {
  check_result(cudaGetLastError(), op, sizes);
}

inline unsigned blocks_for(size_t n, unsigned threads) {
  const size_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 65535u * 64u ? b : 65535u * 64u);
}

// A grid-stride loop: correct for any n whatever the grid size.
#define TRAINER_GRID_LOOP(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024),
// returned to every thread. `shared` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : 0.f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace trainer::cuda
