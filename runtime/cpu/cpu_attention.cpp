// Causal multi-head attention with grouped-query heads, on CPU, in the
// flash-style contract of runtime/backend.h: per-row statistics are kept,
// probabilities are not.
// Work is split over (batch, head) in forward and (batch, kv head) in
// backward across OpenMP threads, each running sgemm on strided views of the
// packed q|k|v rows; OpenBLAS's OpenMP build runs single-threaded inside a
// parallel region. Query rows go in blocks of attention_block(); a block
// [i0, i0 + rows) only needs keys [0, i0 + rows) (causal), so its scores are
// rows x (i0 + rows) in a per-thread buffer. Within a block the masked upper
// triangle is computed and discarded: at the sequence lengths we train that
// is cheaper than triangular pieces. At T <= block a head is one block and
// the products are those of an unblocked kernel, so results do not move.
// The backward rebuilds each block's probabilities with the forward's own
// operations (the same product, then exp(s - max) and a multiply by
// 1 / sum), so they are the forward's to the bit, and a kv-head task owns
// every query head of its group, so dK/dV accumulate without races.
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

namespace {
// Scores of query rows [i0, i0 + rows) against keys [0, kend), scaled, into
// S (leading dimension kend).
void scores(float* S, const float* qkv, const HeadView& hv, const AttentionShape& s, int i0, int rows,
            int kend, float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kend, s.hd, scale, qkv + hv.q + (size_t)i0 * s.row,
              s.row, qkv + hv.k, s.row, 0.f, S, kend);
}
}  // namespace

void CpuBackend::f32_attention_fwd(float* out, float* stats, const float* qkv, const AttentionShape& s) {
  const int T = s.T, hd = s.hd, out_row = s.H * s.hd, block = std::min(T, attention_block_);
  const float scale = 1.0f / std::sqrt((float)hd);
  float* P_all = scratch((size_t)omp_get_max_threads() * block * T);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < s.B * s.H; bh++) {
    const int b = bh / s.H, h = bh % s.H;
    const HeadView hv = head_view(s, b, h);
    float* P = P_all + (size_t)omp_get_thread_num() * block * T;
    float* st = stats + (size_t)bh * T * kAttentionStats;
    for (int i0 = 0; i0 < T; i0 += block) {
      const int rows = std::min(block, T - i0), kend = i0 + rows;
      scores(P, qkv, hv, s, i0, rows, kend, scale);
      for (int r = 0; r < rows; r++) {
        const int n = i0 + r + 1;  // keys this query sees
        float* p = P + (size_t)r * kend;
        const float mx = cpu::max_of(p, n);
        const float sum = (float)cpu::exp_shift_inplace(p, n, mx);
        cpu::scale_inplace(p, 1.f / sum, n);
        std::fill(p + n, p + kend, 0.f);
        st[(size_t)(i0 + r) * kAttentionStats] = mx;
        st[(size_t)(i0 + r) * kAttentionStats + 1] = sum;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, kend, 1.f, P, kend, qkv + hv.v, s.row,
                  0.f, out + ((size_t)b * T + i0) * out_row + (size_t)h * hd, out_row);
    }
  }
}

void CpuBackend::f32_attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* stats,
                               const AttentionShape& s) {
  const int T = s.T, hd = s.hd, out_row = s.H * s.hd, group = s.H / s.KVH, block = std::min(T, attention_block_);
  const float scale = 1.0f / std::sqrt((float)hd);
  float* buf = scratch((size_t)omp_get_max_threads() * 2 * block * T);
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < s.B * s.KVH; bk++) {
    const int b = bk / s.KVH, kvh = bk % s.KVH;
    float* P = buf + (size_t)omp_get_thread_num() * 2 * block * T;
    float* dP = P + (size_t)block * T;
    const HeadView kv = head_view(s, b, kvh * group);
    if (block < T)  // blocks only add into dK/dV: start them at zero
      for (int t = 0; t < T; t++) {
        std::fill_n(dqkv + kv.k + (size_t)t * s.row, hd, 0.f);
        std::fill_n(dqkv + kv.v + (size_t)t * s.row, hd, 0.f);
      }
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
      const HeadView hv = head_view(s, b, h);
      const float* st = stats + ((size_t)b * s.H + h) * T * kAttentionStats;
      // One block: the first query head of a kv group overwrites dK/dV, the rest add.
      const float kv_beta = (block >= T && h == kvh * group) ? 0.f : 1.f;
      for (int i0 = 0; i0 < T; i0 += block) {
        const int rows = std::min(block, T - i0), kend = i0 + rows;
        const float* dO = dout + ((size_t)b * T + i0) * out_row + (size_t)h * hd;
        // P as the forward made it.
        scores(P, qkv, hv, s, i0, rows, kend, scale);
        for (int r = 0; r < rows; r++) {
          const int n = i0 + r + 1;
          float* p = P + (size_t)r * kend;
          cpu::exp_shift(p, n, st[(size_t)(i0 + r) * kAttentionStats]);
          cpu::scale_inplace(p, 1.f / st[(size_t)(i0 + r) * kAttentionStats + 1], n);
          std::fill(p + n, p + kend, 0.f);
        }
        // dV[0:kend] (+)= P^T dO
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kend, hd, rows, 1.f, P, kend, dO, out_row, kv_beta,
                    dqkv + hv.v, s.row);
        // dP = dO V^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kend, hd, 1.f, dO, out_row, qkv + hv.v, s.row,
                    0.f, dP, kend);
        // dS = P * (dP - rowsum(P * dP)); zero above the diagonal.
        for (int r = 0; r < rows; r++) {
          const int n = i0 + r + 1;
          float* d = dP + (size_t)r * kend;
          cpu::softmax_bwd_row(P + (size_t)r * kend, d, n);
          std::fill(d + n, d + kend, 0.f);
        }
        // dQ = scale * dS K ; dK[0:kend] (+)= scale * dS^T Q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, kend, scale, dP, kend, qkv + hv.k, s.row,
                    0.f, dqkv + hv.q + (size_t)i0 * s.row, s.row);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kend, hd, rows, scale, dP, kend,
                    qkv + hv.q + (size_t)i0 * s.row, s.row, kv_beta, dqkv + hv.k, s.row);
      }
    }
  }
}

}  // namespace trainer
