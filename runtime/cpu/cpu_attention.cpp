// Causal multi-head attention with grouped-query heads, on CPU.
// Work is split over (batch, kv head) pairs across OpenMP threads, each
// running sgemm on strided views of the packed q|k|v rows; OpenBLAS's OpenMP
// build runs single-threaded inside a parallel region.
// At T=256 a head's products are too small to split well: one multi-threaded
// sgemm per head cost thousands of thread wake-ups per step. A kv-head task
// owns every query head of its group, so dK/dV accumulate without races. The
// masked upper triangle is computed and discarded: at the sequence lengths we
// train, that is cheaper than triangular pieces.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_kernels.h"

namespace trainer {

namespace {
struct HeadView {
  size_t q, k, v;  // float offsets of head h of batch b in the packed buffer
};
HeadView head_view(const AttentionShape& s, int b, int h) {
  const int kvh = h / (s.H / s.KVH);
  const size_t base = (size_t)b * s.T * s.row;
  return {base + (size_t)h * s.hd, base + (size_t)(s.H + kvh) * s.hd,
          base + (size_t)(s.H + s.KVH + kvh) * s.hd};
}
}  // namespace

void CpuBackend::attention_fwd(float* out, float* probs, const float* qkv,
                               const AttentionShape& s) {
  const int T = s.T, hd = s.hd, out_row = s.H * s.hd;
  const float scale = 1.0f / std::sqrt((float)hd);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < s.B * s.H; bh++) {
    const int b = bh / s.H, h = bh % s.H;
    const HeadView hv = head_view(s, b, h);
    float* P = probs + (size_t)bh * T * T;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, qkv + hv.q, s.row,
                qkv + hv.k, s.row, 0.f, P, T);
    for (int i = 0; i < T; i++) {
      float* p = P + (size_t)i * T;
      const float sum = cpu::exp_shift_inplace(p, i + 1, cpu::max_of(p, i + 1));
      cpu::scale_inplace(p, 1.f / sum, i + 1);
      std::fill(p + i + 1, p + T, 0.f);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.f, P, T, qkv + hv.v,
                s.row, 0.f, out + (size_t)b * T * out_row + (size_t)h * hd, out_row);
  }
}

void CpuBackend::attention_bwd(float* dqkv, const float* dout, const float* qkv,
                               const float* probs, const AttentionShape& s) {
  const int T = s.T, hd = s.hd, out_row = s.H * s.hd, group = s.H / s.KVH;
  const float scale = 1.0f / std::sqrt((float)hd);
  float* dP_all = scratch((size_t)omp_get_max_threads() * T * T);
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < s.B * s.KVH; bk++) {
    const int b = bk / s.KVH, kvh = bk % s.KVH;
    float* dP = dP_all + (size_t)omp_get_thread_num() * T * T;
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
      const HeadView hv = head_view(s, b, h);
      const float* P = probs + ((size_t)b * s.H + h) * T * T;
      const float* dO = dout + (size_t)b * T * out_row + (size_t)h * hd;
      // The first query head of a kv group overwrites dK/dV, the rest add.
      const float kv_beta = (h == kvh * group) ? 0.f : 1.f;
      // dV (+)= P^T dO
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.f, P, T, dO, out_row,
                  kv_beta, dqkv + hv.v, s.row);
      // dP = dO V^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.f, dO, out_row,
                  qkv + hv.v, s.row, 0.f, dP, T);
      // dS = P * (dP - rowsum(P * dP)); zero above the diagonal.
      for (int i = 0; i < T; i++) {
        float* d = dP + (size_t)i * T;
        cpu::softmax_bwd_row(P + (size_t)i * T, d, i + 1);
        std::fill(d + i + 1, d + T, 0.f);
      }
      // dQ = scale * dS K ; dK (+)= scale * dS^T Q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, dP, T,
                  qkv + hv.k, s.row, 0.f, dqkv + hv.q, s.row);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, dP, T,
                  qkv + hv.q, s.row, kv_beta, dqkv + hv.k, s.row);
    }
  }
}

}  // namespace trainer
