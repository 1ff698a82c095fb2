// The CPU backend's rows by index (the Mixture-of-Experts dispatch and
// combine, runtime/backend_ops.inc): fp32 views of typed arguments
// (runtime/cpu/f32_args.h), each row summed in a fixed order.
#include <cstring>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/f32_args.h"

namespace trainer {

void CpuBackend::gather_rows(Ref dst, CRef src, int src_rows, const int32_t* index, const float* w, int n, int cols) {
  F32Args f;
  const float* s = f.in(src, (size_t)src_rows * cols);
  float* d = f.out(dst, (size_t)n * cols);
  for (int i = 0; i < n; i++) {
    float* row = d + (size_t)i * cols;
    if (index[i] < 0) {
      std::memset(row, 0, sizeof(float) * cols);
      continue;
    }
    const float* from = s + (size_t)index[i] * cols;
    const float scale = w ? w[i] : 1.f;
    for (int c = 0; c < cols; c++) row[c] = scale * from[c];
  }
}

void CpuBackend::combine_rows(Ref out, CRef src, int src_rows, const int32_t* index, const float* w, int rows, int k,
                              int cols) {
  F32Args f;
  const float* s = f.in(src, (size_t)src_rows * cols);
  float* o = f.inout(out, (size_t)rows * cols);
  for (int t = 0; t < rows; t++) {
    float* row = o + (size_t)t * cols;
    for (int j = 0; j < k; j++) {
      const int32_t at = index[(size_t)t * k + j];
      if (at < 0) continue;
      const float* from = s + (size_t)at * cols;
      const float scale = w ? w[(size_t)t * k + j] : 1.f;
      for (int c = 0; c < cols; c++) row[c] += scale * from[c];
    }
  }
}

void CpuBackend::row_dots(float* dots, CRef a, CRef b, int b_rows, const int32_t* index, int rows, int k, int cols) {
  F32Args f;
  const float* fa = f.in(a, (size_t)rows * cols);
  const float* fb = f.in(b, (size_t)b_rows * cols);
  for (int t = 0; t < rows; t++)
    for (int j = 0; j < k; j++) {
      const int32_t at = index[(size_t)t * k + j];
      float sum = 0.f;
      if (at >= 0)
        for (int c = 0; c < cols; c++) sum += fa[(size_t)t * cols + c] * fb[(size_t)at * cols + c];
      dots[(size_t)t * k + j] = sum;
    }
}

}  // namespace trainer
