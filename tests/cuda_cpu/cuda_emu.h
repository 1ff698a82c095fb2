#pragma once
// The CUDA names the kernels of runtime/cuda/*.cu use, on the host, so that
// those sources compile unchanged as C++ with g++ and run on the CPU (the
// `cuda-cpu` test tier). What a GPU would do that the kernels depend on is
// kept, strictly: every thread of a block is a fiber; __syncthreads() is a
// real barrier of the block's threads, and one reached while other threads
// of the block have exited is an error (divergent barrier); warp shuffles
// synchronise the 32 lanes of one warp (not the block) and a mask naming a
// lane that has exited, or that does not exist, is an error; __shared__
// arrays are per block and start as NaN (all bits set), so a slot read
// before it is written shows; the threads of a block run in a chosen order
// (forward, reverse, seeded random), since no one order exposes every race.
// Between two synchronisation points a thread runs alone, so anything the
// kernel leaves unsynchronised can be ordered against it.
//
// Launches `k<<<g, b, shmem, stream>>>(args)` and `__shared__ T a[N];` are
// rewritten by tests/cuda_cpu/rewrite_cuda.py into calls of Launch and
// shared<T[N]>() in a copy of each .cu in the build tree: that is the whole
// difference from the GPU build. Launches run synchronously.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The 16-byte vector type of vector loads and stores, aligned as on the GPU
// (UBSan, in the tier's sanitizer build, reports a misaligned one).
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

typedef struct CUstream_st* cudaStream_t;
enum cudaError_t { cudaSuccess = 0 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t = nullptr) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t = nullptr) {
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
// Launch failures throw (below), so no error is ever left pending.
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }

// bf16: the 16 top bits of an fp32, rounded to nearest even (NaN stays NaN).
// tests/cuda_cpu/test_cuda_cpu.cpp holds these against the CUDA toolkit's own
// cuda_bf16.h.
struct __nv_bfloat16 {
  unsigned short x;
};
inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = (uint32_t)b.x << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return {(unsigned short)((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {(unsigned short)(u >> 16)};
}

inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline size_t min(size_t a, size_t b) { return a < b ? a : b; }
inline size_t max(size_t a, size_t b) { return a > b ? a : b; }

namespace trainer_emu {

// The order in which the scheduler resumes the threads of a block.
enum class Order { Forward, Reverse, Random };
void set_order(Order order, unsigned seed = 1);
// From TRAINER_EMU_ORDER: "forward", "reverse" or "random[:SEED]" (forward if unset).
void set_order_from_env();
std::string order_name();

const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

void syncthreads();
enum class ShflOp { Idx, Up, Down, Xor, SyncWarp };
uint64_t exchange(unsigned mask, ShflOp op, uint64_t bits, int arg, int width);
template <class T>
T shuffle(unsigned mask, ShflOp op, T v, int arg, int width) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  b = exchange(mask, op, b, arg, width);
  T r;
  std::memcpy(&r, &b, sizeof r);
  return r;
}

// Per-block storage for one __shared__ declaration (`site` tells them apart),
// NaN-filled when the block first touches it.
void* shared_bytes(const void* site, size_t bytes);
template <class A>
A& shared(const void* site) {
  return *static_cast<A*>(shared_bytes(site, sizeof(A)));
}

// Runs body once per thread of every block of the grid; throws
// std::runtime_error naming the kernel and the block on a barrier, shuffle or
// deadlock fault, or an exception thrown in the body.
void run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body);

struct Launch {
  dim3 grid, block;
  size_t shared_bytes;
  Launch(dim3 g, dim3 b, size_t shmem = 0, cudaStream_t = nullptr) : grid(g), block(b), shared_bytes(shmem) {}
  template <class F>
  void operator()(const char* kernel, F&& body) const {
    if (shared_bytes) throw std::logic_error(std::string(kernel) + ": dynamic shared memory is not emulated");
    run_grid(kernel, grid, block, std::function<void()>(body));
  }
};

}  // namespace trainer_emu

#define threadIdx (::trainer_emu::thread_idx())
#define blockIdx (::trainer_emu::block_idx())
#define blockDim (::trainer_emu::block_dim())
#define gridDim (::trainer_emu::grid_dim())

inline void __syncthreads() { ::trainer_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::trainer_emu::exchange(mask, ::trainer_emu::ShflOp::SyncWarp, 0, 0, 32);
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::trainer_emu::shuffle(mask, ::trainer_emu::ShflOp::Idx, v, src_lane, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::trainer_emu::shuffle(mask, ::trainer_emu::ShflOp::Up, v, (int)delta, width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::trainer_emu::shuffle(mask, ::trainer_emu::ShflOp::Down, v, (int)delta, width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::trainer_emu::shuffle(mask, ::trainer_emu::ShflOp::Xor, v, lane_mask, width);
}
