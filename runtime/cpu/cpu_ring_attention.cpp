// Ring attention's chunk pairs on the CPU (context parallelism): the
// kernels of cpu_attention.cpp, for query rows of one chunk against the
// keys of one chunk that may have come from another rank, with the result
// merged into a running output by the rows' statistics instead of written.
// Forward, per query row: the pair's scores s, m' = max(m, max s), the
// running sum and output scaled by exp(m - m') and exp(s - m') and its
// products with V added: after the last pair the statistics are the whole
// row's (max, sum of exponentials), as attention_fwd keeps them.
// Backward, per pair: P = exp(s - m) / sum from the final statistics, then
// the usual dV += P^T dO, dS = P * (dO V^T - rowsum(dO * O)), dQ += dS K,
// dK += dS^T Q: rowsum(dO * O) is the whole row's rowsum(P * dP), which a
// pair alone cannot form. Work is split over (batch, head) forward and
// (batch, kv head) backward, so dK/dV accumulate without races.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_kernels.h"

namespace trainer {

namespace {
// Float offsets of head h of batch b: its queries in the local packed
// buffer, its kv head's keys and values in the pair's block, at the pair's
// first rows.
struct PairView {
  size_t q, k, v;
};
PairView pair_view(const AttentionShape& s, const AttentionPair& p, int b, int h) {
  const int kvh = h / (s.H / s.KVH);
  const size_t kv_base = ((size_t)b * p.kv_T + p.k0) * p.kv_row;
  return {((size_t)b * s.T + p.q0) * s.row + (size_t)h * s.hd, kv_base + p.k_off + (size_t)kvh * s.hd,
          kv_base + p.v_off + (size_t)kvh * s.hd};
}
// Keys query row r (of the pair) sees, and the keys a block of rows
// [i0, i0 + rows) needs.
int seen(const AttentionPair& p, int r) { return p.causal ? r + 1 : p.rows; }
int block_keys(const AttentionPair& p, int i0, int rows) { return p.causal ? i0 + rows : p.rows; }
}  // namespace

void CpuBackend::f32_attention_pair_fwd(float* acc, float* stats, const float* qkv, const float* kv,
                                        const AttentionShape& s, const AttentionPair& p) {
  const int hd = s.hd, width = s.H * s.hd, block = std::min(p.rows, attention_block_);
  const float scale = 1.0f / std::sqrt((float)hd);
  float* P_all = scratch((size_t)omp_get_max_threads() * block * p.rows);
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < s.B * s.H; bh++) {
    const int b = bh / s.H, h = bh % s.H;
    const PairView v = pair_view(s, p, b, h);
    float* P = P_all + (size_t)omp_get_thread_num() * block * p.rows;
    float* st = stats + ((size_t)bh * s.T + p.q0) * kAttentionStats;
    for (int i0 = 0; i0 < p.rows; i0 += block) {
      const int rows = std::min(block, p.rows - i0), kend = block_keys(p, i0, rows);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kend, hd, scale, qkv + v.q + (size_t)i0 * s.row,
                  s.row, kv + v.k, p.kv_row, 0.f, P, kend);
      float* out = acc + ((size_t)b * s.T + p.q0 + i0) * width + (size_t)h * hd;
      for (int r = 0; r < rows; r++) {
        const int n = seen(p, i0 + r);
        float* row = P + (size_t)r * kend;
        float* rs = st + (size_t)(i0 + r) * kAttentionStats;
        const float m = std::max(rs[0], cpu::max_of(row, n));
        const float keep = std::exp(rs[0] - m);  // 0 on the first pair (max -inf)
        rs[1] = rs[1] * keep + (float)cpu::exp_shift_inplace(row, n, m);
        rs[0] = m;
        std::fill(row + n, row + kend, 0.f);
        cpu::scale_inplace(out + (size_t)r * width, keep, hd);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, kend, 1.f, P, kend, kv + v.v, p.kv_row, 1.f,
                  out, width);
    }
  }
}

void CpuBackend::f32_attention_pair_bwd(float* dq, float* dkv, const float* dout, const float* qkv,
                                        const float* kv, const float* out, const float* stats,
                                        const AttentionShape& s, const AttentionPair& p) {
  const int hd = s.hd, width = s.H * s.hd, group = s.H / s.KVH, block = std::min(p.rows, attention_block_);
  const int dkv_row = 2 * s.KVH * hd;
  const float scale = 1.0f / std::sqrt((float)hd);
  float* buf = scratch((size_t)omp_get_max_threads() * 2 * block * p.rows);
#pragma omp parallel for schedule(static)
  for (int bk = 0; bk < s.B * s.KVH; bk++) {
    const int b = bk / s.KVH, kvh = bk % s.KVH;
    float* P = buf + (size_t)omp_get_thread_num() * 2 * block * p.rows;
    float* dP = P + (size_t)block * p.rows;
    float* dK = dkv + ((size_t)b * p.kv_T + p.k0) * dkv_row + (size_t)kvh * hd;
    float* dV = dK + (size_t)s.KVH * hd;
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
      const PairView v = pair_view(s, p, b, h);
      const float* st = stats + (((size_t)b * s.H + h) * s.T + p.q0) * kAttentionStats;
      for (int i0 = 0; i0 < p.rows; i0 += block) {
        const int rows = std::min(block, p.rows - i0), kend = block_keys(p, i0, rows);
        const size_t at = ((size_t)b * s.T + p.q0 + i0) * width + (size_t)h * hd;
        const float *dO = dout + at, *O = out + at, *Q = qkv + v.q + (size_t)i0 * s.row;
        // P from the final statistics.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kend, hd, scale, Q, s.row, kv + v.k, p.kv_row,
                    0.f, P, kend);
        for (int r = 0; r < rows; r++) {
          const int n = seen(p, i0 + r);
          float* row = P + (size_t)r * kend;
          cpu::exp_shift(row, n, st[(size_t)(i0 + r) * kAttentionStats]);
          cpu::scale_inplace(row, 1.f / st[(size_t)(i0 + r) * kAttentionStats + 1], n);
          std::fill(row + n, row + kend, 0.f);
        }
        // dV[0:kend] += P^T dO
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kend, hd, rows, 1.f, P, kend, dO, width, 1.f, dV,
                    dkv_row);
        // dP = dO V^T, then dS = P * (dP - rowsum(dO * O)); zero where masked.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kend, hd, 1.f, dO, width, kv + v.v, p.kv_row,
                    0.f, dP, kend);
        for (int r = 0; r < rows; r++) {
          double D = 0;
          for (int e = 0; e < hd; e++) D += (double)dO[(size_t)r * width + e] * O[(size_t)r * width + e];
          const int n = seen(p, i0 + r);
          const float* pr = P + (size_t)r * kend;
          float* d = dP + (size_t)r * kend;
          for (int j = 0; j < n; j++) d[j] = pr[j] * (d[j] - (float)D);
          std::fill(d + n, d + kend, 0.f);
        }
        // dQ += scale * dS K ; dK[0:kend] += scale * dS^T Q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, kend, scale, dP, kend, kv + v.k, p.kv_row,
                    1.f, dq + at, width);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kend, hd, rows, scale, dP, kend, Q, s.row, 1.f, dK,
                    dkv_row);
      }
    }
  }
}

}  // namespace trainer
