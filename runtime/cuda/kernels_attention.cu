// fp32 causal attention with grouped-query heads, for the fp32 precision
// (cuDNN's fused attention takes 16-bit inputs; the bf16 path uses it). A
// warp owns one query row: lanes split the head dimension, a score is a warp
// sum in a fixed shuffle order, the softmax runs online over keys 0..i, so
// memory stays O(T) and no probabilities are kept (the stats contract of
// runtime/backend.h: per row the max and the sum of exponentials relative to
// it). The backward rebuilds probabilities from q, k and the stats: one warp
// per query row computes D_i = sum_j P_ij dP_ij and dQ; one warp per key row
// and kv head walks every query head of its group and every later query for
// dK and dV, so nothing is accumulated by two threads (deterministic).
// Simple rather than fast: the fp32 path exists for exactness, not speed.
#include <stdexcept>

#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/kernels.h"

namespace trainer::cuda {

namespace {
struct Heads {
  size_t q, k, v;  // element offsets of head h of batch b, token 0
};
__device__ Heads heads(const AttentionShape& s, int b, int h) {
  const int kvh = h / (s.H / s.KVH);
  const size_t base = (size_t)b * s.T * s.row;
  return {base + (size_t)h * s.hd, base + (size_t)(s.H + kvh) * s.hd, base + (size_t)(s.H + s.KVH + kvh) * s.hd};
}

__global__ void fwd_kernel(float* out, float* stats, const float* qkv, AttentionShape s, float scale) {
  const size_t row = (size_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // over B*H*T
  const int lane = threadIdx.x % 32;
  if (row >= (size_t)s.B * s.H * s.T) return;
  const int i = row % s.T, h = (row / s.T) % s.H, b = row / s.T / s.H;
  const Heads hv = heads(s, b, h);
  const float* q = qkv + hv.q + (size_t)i * s.row;
  float acc[kMaxPerLane] = {};
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j <= i; j++) {
    const float sc = warp_dot(q, 0, qkv + hv.k + (size_t)j * s.row, 0, s.hd, lane) * scale;
    const float mn = fmaxf(m, sc), corr = expf(m - mn), p = expf(sc - mn);
    const float* v = qkv + hv.v + (size_t)j * s.row;
    for (int e = lane, k = 0; e < s.hd; e += 32, k++) acc[k] = acc[k] * corr + p * v[e];
    l = l * corr + p;
    m = mn;
  }
  float* o = out + ((size_t)b * s.T + i) * s.H * s.hd + (size_t)h * s.hd;
  for (int e = lane, k = 0; e < s.hd; e += 32, k++) o[e] = acc[k] / l;
  if (lane == 0) stats[row * 2] = m, stats[row * 2 + 1] = l;
}

// Probability of query row i (head h) for key j, rebuilt from the stats.
__device__ float prob(const float* qkv, const float* stats, const AttentionShape& s, const Heads& hv, size_t srow,
                      int i, int j, float scale, int lane) {
  const float sc = warp_dot(qkv + hv.q + (size_t)i * s.row, 0, qkv + hv.k + (size_t)j * s.row, 0, s.hd, lane) * scale;
  return expf(sc - stats[srow * 2]) / stats[srow * 2 + 1];
}

// dQ and D_i = sum_j P_ij dP_ij (D goes to scratch for the dK/dV pass).
__global__ void bwd_q_kernel(float* dqkv, float* D, const float* dout, const float* qkv, const float* stats,
                             AttentionShape s, float scale) {
  const size_t row = (size_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= (size_t)s.B * s.H * s.T) return;
  const int i = row % s.T, h = (row / s.T) % s.H, b = row / s.T / s.H;
  const Heads hv = heads(s, b, h);
  const float* dO = dout + ((size_t)b * s.T + i) * s.H * s.hd + (size_t)h * s.hd;
  float d = 0.f;
  for (int j = 0; j <= i; j++)
    d += prob(qkv, stats, s, hv, row, i, j, scale, lane) * warp_dot(dO, 0, qkv + hv.v + (size_t)j * s.row, 0, s.hd, lane);
  float acc[kMaxPerLane] = {};
  for (int j = 0; j <= i; j++) {
    const float p = prob(qkv, stats, s, hv, row, i, j, scale, lane);
    const float ds = p * (warp_dot(dO, 0, qkv + hv.v + (size_t)j * s.row, 0, s.hd, lane) - d) * scale;
    const float* k = qkv + hv.k + (size_t)j * s.row;
    for (int e = lane, c = 0; e < s.hd; e += 32, c++) acc[c] += ds * k[e];
  }
  float* dq = dqkv + hv.q + (size_t)i * s.row;
  for (int e = lane, c = 0; e < s.hd; e += 32, c++) dq[e] = acc[c];
  if (lane == 0) D[row] = d;
}

__global__ void bwd_kv_kernel(float* dqkv, const float* D, const float* dout, const float* qkv, const float* stats,
                              AttentionShape s, float scale) {
  const size_t row = (size_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // over B*KVH*T
  const int lane = threadIdx.x % 32;
  if (row >= (size_t)s.B * s.KVH * s.T) return;
  const int j = row % s.T, kvh = (row / s.T) % s.KVH, b = row / s.T / s.KVH, group = s.H / s.KVH;
  float dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    const Heads hv = heads(s, b, h);
    const size_t srow0 = ((size_t)b * s.H + h) * s.T;
    for (int i = j; i < s.T; i++) {
      const float p = prob(qkv, stats, s, hv, srow0 + i, i, j, scale, lane);
      const float* dO = dout + ((size_t)b * s.T + i) * s.H * s.hd + (size_t)h * s.hd;
      const float ds = p * (warp_dot(dO, 0, qkv + hv.v + (size_t)j * s.row, 0, s.hd, lane) - D[srow0 + i]) * scale;
      const float* q = qkv + hv.q + (size_t)i * s.row;
      for (int e = lane, c = 0; e < s.hd; e += 32, c++) {
        dv[c] += p * dO[e];
        dk[c] += ds * q[e];
      }
    }
  }
  const Heads hv = heads(s, b, kvh * group);
  for (int e = lane, c = 0; e < s.hd; e += 32, c++) {
    dqkv[hv.k + (size_t)j * s.row + e] = dk[c];
    dqkv[hv.v + (size_t)j * s.row + e] = dv[c];
  }
}

}  // namespace

size_t attention_bwd_scratch_floats(const AttentionShape& s) { return (size_t)s.B * s.H * s.T; }

void attention_fwd_f32(cudaStream_t st, float* out, float* stats, const float* qkv, const AttentionShape& s) {
  check_head_dim(s.hd, "fp32 attention");
  const size_t rows = (size_t)s.B * s.H * s.T;
  if (rows) fwd_kernel<<<warps_grid(rows), kWarpsPerBlock * 32, 0, st>>>(out, stats, qkv, s, 1.f / sqrtf((float)s.hd));
  check_launch("attention_fwd_f32", {(size_t)s.B, (size_t)s.T, (size_t)s.H, (size_t)s.hd});
}

void attention_bwd_f32(cudaStream_t st, float* dqkv, const float* dout, const float* qkv, const float* stats,
                       const AttentionShape& s, float* scratch) {
  check_head_dim(s.hd, "fp32 attention");
  const float scale = 1.f / sqrtf((float)s.hd);
  const size_t qrows = (size_t)s.B * s.H * s.T, kvrows = (size_t)s.B * s.KVH * s.T;
  if (!qrows) return;
  bwd_q_kernel<<<warps_grid(qrows), kWarpsPerBlock * 32, 0, st>>>(dqkv, scratch, dout, qkv, stats, s, scale);
  check_launch("attention_bwd_f32 (dq)", {(size_t)s.B, (size_t)s.T, (size_t)s.H, (size_t)s.hd});
  bwd_kv_kernel<<<warps_grid(kvrows), kWarpsPerBlock * 32, 0, st>>>(dqkv, scratch, dout, qkv, stats, s, scale);
  check_launch("attention_bwd_f32 (dk, dv)", {(size_t)s.B, (size_t)s.T, (size_t)s.KVH, (size_t)s.hd});
}

}  // namespace trainer::cuda
