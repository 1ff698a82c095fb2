// Causal multi-head attention with grouped-query heads, on CPU.
// Per (batch, head) the score and value products are sgemm calls on strided
// views of the packed q|k|v rows; softmax rows run in parallel. The masked
// upper triangle is computed and discarded: at the sequence lengths we train
// it costs less than splitting the products into triangular pieces.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_backend.h"

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
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.H; h++) {
      const HeadView hv = head_view(s, b, h);
      float* P = probs + ((size_t)b * s.H + h) * T * T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, qkv + hv.q, s.row,
                  qkv + hv.k, s.row, 0.f, P, T);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < T; i++) {
        float* p = P + (size_t)i * T;
        float mx = -INFINITY;
        for (int j = 0; j <= i; j++) mx = std::max(mx, p[j]);
        float sum = 0.f;
        for (int j = 0; j <= i; j++) {
          p[j] = std::exp(p[j] - mx);
          sum += p[j];
        }
        const float inv = 1.f / sum;
        for (int j = 0; j <= i; j++) p[j] *= inv;
        for (int j = i + 1; j < T; j++) p[j] = 0.f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.f, P, T, qkv + hv.v,
                  s.row, 0.f, out + (size_t)b * T * out_row + (size_t)h * hd, out_row);
    }
}

void CpuBackend::attention_bwd(float* dqkv, const float* dout, const float* qkv,
                               const float* probs, const AttentionShape& s) {
  const int T = s.T, hd = s.hd, out_row = s.H * s.hd, group = s.H / s.KVH;
  const float scale = 1.0f / std::sqrt((float)hd);
  std::vector<float> dP((size_t)T * T);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.H; h++) {
      const HeadView hv = head_view(s, b, h);
      const float* P = probs + ((size_t)b * s.H + h) * T * T;
      const float* dO = dout + (size_t)b * T * out_row + (size_t)h * hd;
      // The first query head of a kv group overwrites dK/dV, the rest add.
      const float kv_beta = (h % group == 0) ? 0.f : 1.f;
      // dV = P^T dO
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.f, P, T, dO, out_row,
                  kv_beta, dqkv + hv.v, s.row);
      // dP = dO V^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.f, dO, out_row,
                  qkv + hv.v, s.row, 0.f, dP.data(), T);
      // dS = P * (dP - rowsum(P * dP)); zero above the diagonal.
#pragma omp parallel for schedule(static)
      for (int i = 0; i < T; i++) {
        const float* p = P + (size_t)i * T;
        float* d = dP.data() + (size_t)i * T;
        float dot = 0.f;
        for (int j = 0; j <= i; j++) dot += p[j] * d[j];
        for (int j = 0; j <= i; j++) d[j] = p[j] * (d[j] - dot);
        for (int j = i + 1; j < T; j++) d[j] = 0.f;
      }
      // dQ = scale * dS K ; dK (+)= scale * dS^T Q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, dP.data(), T,
                  qkv + hv.k, s.row, 0.f, dqkv + hv.q, s.row);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, dP.data(), T,
                  qkv + hv.q, s.row, kv_beta, dqkv + hv.k, s.row);
    }
}

}  // namespace trainer
