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
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "runtime/tensor_ref.h"

namespace trainer::cuda {

__device__ __forceinline__ float ld(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__nv_bfloat16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// Vector memory access: kPack consecutive elements moved as 16-byte words
// (one word of bf16, two of fp32). A bf16 element loaded alone moves 2 of the
// 16 bytes one load instruction can, so an elementwise kernel on bf16 runs
// out of instructions before bandwidth. Every word must be 16-byte aligned
// (a misaligned vector access faults): see aligned16.
constexpr int kPack = 8;

template <int N, class T>
__device__ __forceinline__ void ld_n(const T* p, size_t i, float (&v)[N]) {
  if constexpr (N == 1) {
    v[0] = ld(p, i);
  } else {
    static_assert(N * sizeof(T) % 16 == 0, "whole 16-byte words");
    uint4 w[N * sizeof(T) / 16];
    for (size_t j = 0; j < sizeof w / 16; j++) w[j] = reinterpret_cast<const uint4*>(p + i)[j];
    T raw[N];
    memcpy(raw, w, sizeof raw);
    for (int j = 0; j < N; j++) v[j] = ld(raw, j);
  }
}
template <int N, class T>
__device__ __forceinline__ void st_n(T* p, size_t i, const float (&v)[N]) {
  if constexpr (N == 1) {
    st(p, i, v[0]);
  } else {
    T raw[N];
    for (int j = 0; j < N; j++) st(raw, j, v[j]);
    uint4 w[N * sizeof(T) / 16];
    memcpy(w, raw, sizeof raw);
    for (size_t j = 0; j < sizeof w / 16; j++) reinterpret_cast<uint4*>(p + i)[j] = w[j];
  }
}

// Whether packs can be used: every pointer 16-byte aligned (a view into a
// buffer may not be) and `period` (the row length of an indexing that wraps
// or jumps per row, 0 for none) a multiple of kPack, so no pack straddles it.
inline bool packable(std::initializer_list<const void*> ptrs, size_t period = 0) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  return period % kPack == 0;
}

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

// Attention's warp-per-row kernels (kernels_attention.cu and
// kernels_ring_attention.cu): a warp owns a query or key row, its lanes
// split the head dimension, at most kMaxPerLane elements each.
constexpr int kMaxPerLane = 8;  // head dimension up to 256
constexpr unsigned kWarpsPerBlock = 4;
inline unsigned warps_grid(size_t rows) { return (unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }
inline void check_head_dim(int hd, const char* op) {
  if (hd > 32 * kMaxPerLane) throw std::invalid_argument(std::string(op) + " on CUDA: head dimension above 256");
}
// a[ia ..) . b[ib ..) over hd elements: a warp sum in a fixed shuffle order.
template <class T, class U>
__device__ float warp_dot(const T* a, size_t ia, const U* b, size_t ib, int hd, int lane) {
  float d = 0.f;
  for (int e = lane; e < hd; e += 32) d += ld(a, ia + e) * ld(b, ib + e);
  return warp_sum(d);
}
// (max, sum of exp(x - max)) of two parts merged; an empty part has max -inf.
__device__ __forceinline__ void lse_merge(float& m, float& s, float mo, float so) {
  const float mn = fmaxf(m, mo);
  if (mn == -INFINITY) return;  // both empty: nothing to rescale
  s = s * expf(m - mn) + so * expf(mo - mn);
  m = mn;
}
__device__ __forceinline__ void warp_lse(float& m, float& s) {
  for (int o = 16; o > 0; o >>= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
    lse_merge(m, s, mo, so);
  }
}
// The (max, sum) pairs of a block of blockDim.x threads (a multiple of 32, at
// most 1024) merged, returned to every thread. `shared` holds 64 floats.
__device__ __forceinline__ void block_lse(float& m, float& s, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  warp_lse(m, s);
  __syncthreads();
  if (lane == 0) shared[warp] = m, shared[32 + warp] = s;
  __syncthreads();
  m = lane < nwarps ? shared[lane] : -INFINITY;
  s = lane < nwarps ? shared[32 + lane] : 0.f;
  warp_lse(m, s);
}

}  // namespace trainer::cuda
