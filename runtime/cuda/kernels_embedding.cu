// Token-embedding backward without atomics: the (token, row) pairs are sorted
// by token with CUB's stable radix sort, so each token's rows stay in row
// order; one block per distinct token then adds them in that order, as the
// CPU backend's loop over rows does.
#include <cub/device/device_radix_sort.cuh>

#include <stdexcept>

#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/kernels.h"

namespace trainer::cuda {

namespace {
__global__ void iota_kernel(int32_t* v, int n) { TRAINER_GRID_LOOP(i, (size_t)n) v[i] = (int32_t)i; }

template <class T>
__global__ void embedding_bwd_kernel(float* dwte, const T* dout, const int32_t* keys, const int32_t* rows_sorted,
                                     int rows, int vocab_offset, int vocab_rows, int C) {
  const int i = blockIdx.x;
  if (i > 0 && keys[i] == keys[i - 1]) return;  // not the first row of its token
  const int v = keys[i] - vocab_offset;
  if (v < 0 || v >= vocab_rows) return;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.f;
    for (int j = i; j < rows && keys[j] == keys[i]; j++) acc += ld(dout, (size_t)rows_sorted[j] * C + c);
    dwte[(size_t)v * C + c] += acc;
  }
}

size_t sort_temp_bytes(int rows) {
  size_t bytes = 0;
  check_result(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int32_t*)nullptr, (int32_t*)nullptr,
                                               (const int32_t*)nullptr, (int32_t*)nullptr, rows),
               "embedding_bwd (CUB's scratch size)", {(size_t)rows});
  return bytes;
}
size_t align256(size_t b) { return (b + 255) / 256 * 256; }
}  // namespace

size_t embedding_bwd_scratch_bytes(int rows) { return 3 * align256(rows * sizeof(int32_t)) + sort_temp_bytes(rows); }

void embedding_bwd(cudaStream_t s, float* dwte, CRef dout, const int32_t* tokens, int rows, int vocab_offset,
                   int vocab_rows, int C, void* scratch, size_t scratch_bytes) {
  if (!rows) return;
  if (scratch_bytes < embedding_bwd_scratch_bytes(rows)) throw std::logic_error("embedding_bwd: scratch too small");
  char* p = static_cast<char*>(scratch);
  int32_t* keys = reinterpret_cast<int32_t*>(p);
  int32_t* rows_in = reinterpret_cast<int32_t*>(p + align256(rows * sizeof(int32_t)));
  int32_t* rows_sorted = reinterpret_cast<int32_t*>(p + 2 * align256(rows * sizeof(int32_t)));
  void* temp = p + 3 * align256(rows * sizeof(int32_t));
  size_t temp_bytes = sort_temp_bytes(rows);
  iota_kernel<<<blocks_for(rows, 256), 256, 0, s>>>(rows_in, rows);
  check_launch("embedding_bwd (row numbers)", {(size_t)rows});
  check_result(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, keys, rows_in, rows_sorted, rows, 0, 32, s),
               "embedding_bwd (CUB radix sort of the tokens)", {(size_t)rows});
  TRAINER_DISPATCH(dout.dt, T, embedding_bwd_kernel<<<rows, 256, 0, s>>>(dwte, as<T>(dout), keys, rows_sorted, rows,
                                                                          vocab_offset, vocab_rows, C));
  check_launch("embedding_bwd", {(size_t)rows, (size_t)C});
}

}  // namespace trainer::cuda
