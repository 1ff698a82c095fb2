#pragma once
// The CUDA CPU tier's stand-in for CUB's radix sort: what the kernels rely on
// (a stable sort of key/value pairs by signed key, the same temp-size query
// protocol) by std::stable_sort on the host. begin_bit/end_bit must cover the
// whole key, as they do in runtime/cuda/kernels_embedding.cu.
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "tests/cuda_cpu/cuda_emu.h"

namespace cub {
struct DeviceRadixSort {
  template <class K, class V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                               V* values_out, int n, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t = nullptr) {
    if (!temp) {
      temp_bytes = 1;  // CUB asks for some temporary storage even for n = 0
      return cudaSuccess;
    }
    if (begin_bit != 0 || end_bit != (int)sizeof(K) * 8)
      throw std::logic_error("CUB stand-in: partial-key radix sorts are not emulated");
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys_in[a] < keys_in[b]; });
    std::vector<K> k(n);
    std::vector<V> v(n);
    for (int i = 0; i < n; i++) k[i] = keys_in[order[i]], v[i] = values_in[order[i]];
    std::copy(k.begin(), k.end(), keys_out);
    std::copy(v.begin(), v.end(), values_out);
    return cudaSuccess;
  }
};
}  // namespace cub
