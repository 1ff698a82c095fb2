// Ring attention's chunk pairs on CUDA (context parallelism), in the
// contract of runtime/backend_ops.inc.
//
// fp32: the pairs are kernels of our own, computed the way
// kernels_attention.cu does: one warp per query row, lanes splitting the
// head dimension, scores as warp sums in a fixed shuffle order, no
// floating-point atomics. Forward (the merge): a warp takes its row's running
// output and statistics (max m, sum l of exponentials relative to m) and
// folds in each key of the pair online: m' = max(m, s), the output and l
// scaled by exp(m - m') and the key's exp(s - m') added, so after the ring's
// last pair they are the whole row's, as attention_fwd keeps them;
// attention_pair_out divides. Backward, with the final statistics and
// output: one warp per query row forms D = rowsum(dO * O) and adds its dQ;
// one warp per key row of the block (every query head of its kv group) adds
// dK and dV. Each accumulator row belongs to one warp, so the sums do not race.
//
// bf16: cuDNN's SDPA computes each pair (runtime/cuda/cudnn_sdpa.h), and
// the kernels here carry its results into the ring's fp32 state:
// attention_block_merge folds a block's output and log-sum-exp into the
// running output (the block is the state (max lse, sum 1, output)),
// attention_pair_lse gives the backward the final log-sum-exp of a pair's
// query rows, and attention_block_grads_add adds the pair's bf16 dQ|dK|dV
// into the fp32 accumulators.
#include <stdexcept>
#include <string>

#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/kernels.h"

namespace trainer::cuda {

namespace {
constexpr unsigned kThreads = 256;

// Element offsets of head h of sequence b at a pair's first rows: its
// queries in the local packed q|k|v buffer, its kv head's keys and values
// in the travelling block.
struct PairRows {
  size_t q, k, v;
};
__device__ PairRows pair_rows(const AttentionShape& s, const AttentionPair& p, int b, int h) {
  const int kvh = h / (s.H / s.KVH);
  const size_t kv_base = ((size_t)b * p.kv_T + p.k0) * p.kv_row;
  return {((size_t)b * s.T + p.q0) * s.row + (size_t)h * s.hd, kv_base + p.k_off + (size_t)kvh * s.hd,
          kv_base + p.v_off + (size_t)kvh * s.hd};
}

// The own pair kernels below are fp32 only (bf16 pairs are cuDNN's).
__global__ void pair_fwd_kernel(float* acc, float* stats, const float* qkv, const float* kv, AttentionShape s,
                                AttentionPair p, float scale) {
  const size_t row = (size_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // over B*H*rows
  const int lane = threadIdx.x % 32;
  if (row >= (size_t)s.B * s.H * p.rows) return;
  const int i = row % p.rows, h = (row / p.rows) % s.H, b = row / p.rows / s.H;
  const PairRows at = pair_rows(s, p, b, h);
  float* st_row = stats + (((size_t)b * s.H + h) * s.T + p.q0 + i) * 2;
  float* out = acc + ((size_t)b * s.T + p.q0 + i) * s.H * s.hd + (size_t)h * s.hd;
  float a[kMaxPerLane];
  for (int e = lane, k = 0; e < s.hd; e += 32, k++) a[k] = out[e];
  float m = st_row[0], l = st_row[1];
  const int n = p.causal ? i + 1 : p.rows;
  for (int j = 0; j < n; j++) {
    const float sc = warp_dot(qkv, at.q + (size_t)i * s.row, kv, at.k + (size_t)j * p.kv_row, s.hd, lane) * scale;
    const float mn = fmaxf(m, sc), corr = expf(m - mn), e_s = expf(sc - mn);  // corr 0 while m is -inf
    for (int e = lane, k = 0; e < s.hd; e += 32, k++) a[k] = a[k] * corr + e_s * ld(kv, at.v + (size_t)j * p.kv_row + e);
    l = l * corr + e_s;
    m = mn;
  }
  for (int e = lane, k = 0; e < s.hd; e += 32, k++) out[e] = a[k];
  __syncwarp();
  if (lane == 0) st_row[0] = m, st_row[1] = l;
}

template <class T>
__global__ void pair_out_kernel(T* out, const float* acc, const float* stats, AttentionShape s) {
  TRAINER_GRID_LOOP(idx, (size_t)s.B * s.T * s.H * s.hd) {
    const size_t bth = idx / s.hd;  // (b, t, h)
    const int h = bth % s.H, t = (bth / s.H) % s.T, b = bth / s.H / s.T;
    st(out, idx, acc[idx] * (1.f / stats[(((size_t)b * s.H + h) * s.T + t) * 2 + 1]));  // as the CPU rounds it
  }
}

// P of query row i for key j, from the final statistics.
__device__ float pair_prob(const float* qkv, const float* kv, const float* st_row, const AttentionShape& s,
                           const AttentionPair& p, const PairRows& at, int i, int j, float scale, int lane) {
  const float sc = warp_dot(qkv, at.q + (size_t)i * s.row, kv, at.k + (size_t)j * p.kv_row, s.hd, lane) * scale;
  return expf(sc - st_row[0]) / st_row[1];
}

// dQ of one query row, and its D = rowsum(dO * O) into D[B*H*rows] for the dK/dV pass.
__global__ void pair_bwd_q_kernel(float* dq, float* D, const float* dout, const float* qkv, const float* kv,
                                  const float* out, const float* stats, AttentionShape s, AttentionPair p, float scale) {
  const size_t row = (size_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // over B*H*rows
  const int lane = threadIdx.x % 32;
  if (row >= (size_t)s.B * s.H * p.rows) return;
  const int i = row % p.rows, h = (row / p.rows) % s.H, b = row / p.rows / s.H;
  const PairRows at = pair_rows(s, p, b, h);
  const float* st_row = stats + (((size_t)b * s.H + h) * s.T + p.q0 + i) * 2;
  const size_t o = ((size_t)b * s.T + p.q0 + i) * s.H * s.hd + (size_t)h * s.hd;  // dO, O and dQ of the row
  const float d = warp_dot(dout, o, out, o, s.hd, lane);
  float a[kMaxPerLane] = {};
  const int n = p.causal ? i + 1 : p.rows;
  for (int j = 0; j < n; j++) {
    const float pr = pair_prob(qkv, kv, st_row, s, p, at, i, j, scale, lane);
    const float ds = pr * (warp_dot(dout, o, kv, at.v + (size_t)j * p.kv_row, s.hd, lane) - d) * scale;
    for (int e = lane, k = 0; e < s.hd; e += 32, k++) a[k] += ds * ld(kv, at.k + (size_t)j * p.kv_row + e);
  }
  for (int e = lane, k = 0; e < s.hd; e += 32, k++) dq[o + e] += a[k];
  if (lane == 0) D[row] = d;
}

// dK and dV of one key row of the block: every query head of its kv group,
// every query row of the pair that sees it.
__global__ void pair_bwd_kv_kernel(float* dkv, const float* D, const float* dout, const float* qkv, const float* kv,
                                   const float* stats, AttentionShape s, AttentionPair p, float scale) {
  const size_t row = (size_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // over B*KVH*rows
  const int lane = threadIdx.x % 32;
  if (row >= (size_t)s.B * s.KVH * p.rows) return;
  const int j = row % p.rows, kvh = (row / p.rows) % s.KVH, b = row / p.rows / s.KVH, group = s.H / s.KVH;
  float dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
  for (int h = kvh * group; h < (kvh + 1) * group; h++) {
    const PairRows at = pair_rows(s, p, b, h);
    const size_t srow0 = ((size_t)b * s.H + h) * s.T + p.q0, drow0 = ((size_t)b * s.H + h) * p.rows;
    for (int i = p.causal ? j : 0; i < p.rows; i++) {
      const float pr = pair_prob(qkv, kv, stats + (srow0 + i) * 2, s, p, at, i, j, scale, lane);
      const size_t o = ((size_t)b * s.T + p.q0 + i) * s.H * s.hd + (size_t)h * s.hd;
      const float ds = pr * (warp_dot(dout, o, kv, at.v + (size_t)j * p.kv_row, s.hd, lane) - D[drow0 + i]) * scale;
      for (int e = lane, k = 0; e < s.hd; e += 32, k++) {
        dv[k] += pr * ld(dout, o + e);
        dk[k] += ds * ld(qkv, at.q + (size_t)i * s.row + e);
      }
    }
  }
  float* dK = dkv + ((size_t)b * p.kv_T + p.k0 + j) * (2 * (size_t)s.KVH * s.hd) + (size_t)kvh * s.hd;
  float* dV = dK + (size_t)s.KVH * s.hd;
  for (int e = lane, k = 0; e < s.hd; e += 32, k++) dK[e] += dk[k], dV[e] += dv[k];
}

template <class T>
__global__ void kv_pack_kernel(T* kv, const T* qkv, AttentionShape s) {
  const size_t n = 2 * (size_t)s.KVH * s.hd, from = (size_t)s.H * s.hd;
  TRAINER_GRID_LOOP(idx, (size_t)s.B * s.T * n) kv[idx] = qkv[idx / n * s.row + from + idx % n];
}

template <class T>
__global__ void pair_grads_kernel(T* dqkv, const float* dq, const float* dkv, AttentionShape s) {
  const size_t width = (size_t)s.H * s.hd, kv_row = 2 * (size_t)s.KVH * s.hd;
  TRAINER_GRID_LOOP(idx, (size_t)s.B * s.T * s.row) {
    const size_t t = idx / s.row, c = idx % s.row;
    st(dqkv, idx, c < width ? dq[t * width + c] : dkv[t * kv_row + c - width]);
  }
}

// One warp per query row of the pair: the block is (max lse_b, sum 1,
// output o_b) in the running form, so m' = max(m, lse_b), the running
// output and sum scaled by exp(m - m') and the block's added with weight
// exp(lse_b - m').
template <class T>
__global__ void block_merge_kernel(float* acc, float* stats, const T* o_blk, const float* lse_blk, AttentionShape s,
                                   AttentionPair p) {
  const size_t row = (size_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;  // over B*H*rows
  const int lane = threadIdx.x % 32;
  if (row >= (size_t)s.B * s.H * p.rows) return;
  const int i = row % p.rows, h = (row / p.rows) % s.H, b = row / p.rows / s.H;
  float* st_row = stats + (((size_t)b * s.H + h) * s.T + p.q0 + i) * 2;
  float* out = acc + ((size_t)b * s.T + p.q0 + i) * s.H * s.hd + (size_t)h * s.hd;
  const size_t o = ((size_t)b * p.rows + i) * s.H * s.hd + (size_t)h * s.hd;
  const float m = st_row[0], l = st_row[1], lse = lse_blk[row];
  const float mn = fmaxf(m, lse), corr = expf(m - mn), w = expf(lse - mn);  // corr 0 while m is -inf
  for (int e = lane; e < s.hd; e += 32) out[e] = out[e] * corr + w * ld(o_blk, o + e);
  __syncwarp();  // every lane has read the row's statistics
  if (lane == 0) st_row[0] = mn, st_row[1] = l * corr + w;
}

__global__ void pair_lse_kernel(float* lse, const float* stats, AttentionShape s, AttentionPair p) {
  TRAINER_GRID_LOOP(r, (size_t)s.B * s.H * p.rows) {  // r over (b, h, i)
    const float* st_row = stats + ((r / p.rows) * s.T + p.q0 + r % p.rows) * 2;
    lse[r] = st_row[0] + logf(st_row[1]);
  }
}

// A row of the pair's packed gradient is the query row's dQ, then the key
// row's dK and dV (the layout of dkv's rows).
template <class T>
__global__ void block_grads_add_kernel(float* dq, float* dkv, const T* g, AttentionShape s, AttentionPair p) {
  const size_t width = (size_t)s.H * s.hd, kv_row = 2 * (size_t)s.KVH * s.hd;
  TRAINER_GRID_LOOP(idx, (size_t)s.B * p.rows * s.row) {
    const size_t r = idx / s.row, c = idx % s.row, b = r / p.rows, i = r % p.rows;
    if (c < width)
      dq[(b * s.T + p.q0 + i) * width + c] += ld(g, idx);
    else
      dkv[(b * p.kv_T + p.k0 + i) * kv_row + c - width] += ld(g, idx);
  }
}

unsigned grid(size_t n) { return blocks_for(n, kThreads); }
void check_pair(const char* op, const AttentionShape& s, const AttentionPair& p, std::initializer_list<DType> types) {
  require_same_type(op, types);
  check_head_dim(s.hd, op);
  check_attention_pair(op, s, p);
}
void require_f32(const char* op, DType dt) {
  if (dt != DType::F32)
    throw std::logic_error(std::string(op) + ": the own pair kernels are fp32 (bf16 pairs are cuDNN's, merged by "
                                             "attention_block_merge)");
}
}  // namespace

void check_attention_pair(const char* op, const AttentionShape& s, const AttentionPair& p) {
  if (s.KVH <= 0 || s.H % s.KVH != 0) throw std::logic_error(std::string(op) + ": heads must group over the kv heads");
  if (p.q0 < 0 || p.k0 < 0 || p.rows < 0 || p.q0 + p.rows > s.T || p.k0 + p.rows > p.kv_T)
    throw std::logic_error(std::string(op) + ": the pair's rows lie outside the chunk buffers");
}

void attention_pair_fwd(cudaStream_t st_, float* acc, float* stats, CRef qkv, CRef kv, const AttentionShape& s,
                        const AttentionPair& p) {
  check_pair("attention_pair_fwd", s, p, {qkv.dt, kv.dt});
  require_f32("attention_pair_fwd", qkv.dt);
  const size_t rows = (size_t)s.B * s.H * p.rows;
  if (rows)
    pair_fwd_kernel<<<warps_grid(rows), kWarpsPerBlock * 32, 0, st_>>>(acc, stats, qkv.f32(), kv.f32(), s, p,
                                                                        1.f / sqrtf((float)s.hd));
  check_launch("attention_pair_fwd", {(size_t)s.B, (size_t)p.rows, (size_t)s.H, (size_t)s.hd});
}

void attention_pair_out(cudaStream_t st_, Ref out, const float* acc, const float* stats, const AttentionShape& s) {
  const size_t n = (size_t)s.B * s.T * s.H * s.hd;
  if (n) TRAINER_DISPATCH(out.dt, T, pair_out_kernel<<<grid(n), kThreads, 0, st_>>>(as<T>(out), acc, stats, s));
  check_launch("attention_pair_out", {(size_t)s.B, (size_t)s.T, (size_t)s.H, (size_t)s.hd});
}

size_t attention_pair_bwd_scratch_floats(const AttentionShape& s, const AttentionPair& p) {
  return (size_t)s.B * s.H * p.rows;
}

void attention_pair_bwd(cudaStream_t st_, float* dq, float* dkv, CRef dout, CRef qkv, CRef kv, CRef out,
                        const float* stats, const AttentionShape& s, const AttentionPair& p, float* scratch) {
  check_pair("attention_pair_bwd", s, p, {dout.dt, qkv.dt, kv.dt, out.dt});
  require_f32("attention_pair_bwd", qkv.dt);
  const float scale = 1.f / sqrtf((float)s.hd);
  const size_t qrows = (size_t)s.B * s.H * p.rows, kvrows = (size_t)s.B * s.KVH * p.rows;
  if (!qrows) return;
  pair_bwd_q_kernel<<<warps_grid(qrows), kWarpsPerBlock * 32, 0, st_>>>(dq, scratch, dout.f32(), qkv.f32(), kv.f32(),
                                                                        out.f32(), stats, s, p, scale);
  check_launch("attention_pair_bwd (dq)", {(size_t)s.B, (size_t)p.rows, (size_t)s.H, (size_t)s.hd});
  pair_bwd_kv_kernel<<<warps_grid(kvrows), kWarpsPerBlock * 32, 0, st_>>>(dkv, scratch, dout.f32(), qkv.f32(),
                                                                          kv.f32(), stats, s, p, scale);
  check_launch("attention_pair_bwd (dk, dv)", {(size_t)s.B, (size_t)p.rows, (size_t)s.KVH, (size_t)s.hd});
}

void attention_kv_pack(cudaStream_t st_, Ref kv, CRef qkv, const AttentionShape& s) {
  require_same_type("attention_kv_pack", {kv.dt, qkv.dt});
  const size_t n = (size_t)s.B * s.T * 2 * s.KVH * s.hd;
  if (n) TRAINER_DISPATCH(qkv.dt, T, kv_pack_kernel<<<grid(n), kThreads, 0, st_>>>(as<T>(kv), as<T>(qkv), s));
  check_launch("attention_kv_pack", {(size_t)s.B, (size_t)s.T, (size_t)s.KVH, (size_t)s.hd});
}

void attention_pair_grads(cudaStream_t st_, Ref dqkv, const float* dq, const float* dkv, const AttentionShape& s) {
  const size_t n = (size_t)s.B * s.T * s.row;
  if (n) TRAINER_DISPATCH(dqkv.dt, T, pair_grads_kernel<<<grid(n), kThreads, 0, st_>>>(as<T>(dqkv), dq, dkv, s));
  check_launch("attention_pair_grads", {(size_t)s.B, (size_t)s.T, (size_t)s.row});
}

void attention_block_merge(cudaStream_t st_, float* acc, float* stats, CRef out_blk, const float* lse_blk,
                           const AttentionShape& s, const AttentionPair& p) {
  check_pair("attention_block_merge", s, p, {out_blk.dt});
  const size_t rows = (size_t)s.B * s.H * p.rows;
  if (rows)
    TRAINER_DISPATCH(out_blk.dt, T, block_merge_kernel<<<warps_grid(rows), kWarpsPerBlock * 32, 0, st_>>>(
                                        acc, stats, as<T>(out_blk), lse_blk, s, p));
  check_launch("attention_block_merge", {(size_t)s.B, (size_t)p.rows, (size_t)s.H, (size_t)s.hd});
}

void attention_pair_lse(cudaStream_t st_, float* lse, const float* stats, const AttentionShape& s,
                        const AttentionPair& p) {
  check_attention_pair("attention_pair_lse", s, p);
  const size_t rows = (size_t)s.B * s.H * p.rows;
  if (rows) pair_lse_kernel<<<grid(rows), kThreads, 0, st_>>>(lse, stats, s, p);
  check_launch("attention_pair_lse", {(size_t)s.B, (size_t)p.rows, (size_t)s.H});
}

void attention_block_grads_add(cudaStream_t st_, float* dq, float* dkv, CRef dqkv_blk, const AttentionShape& s,
                               const AttentionPair& p) {
  check_attention_pair("attention_block_grads_add", s, p);
  const size_t n = (size_t)s.B * p.rows * s.row;
  if (n)
    TRAINER_DISPATCH(dqkv_blk.dt, T,
                     block_grads_add_kernel<<<grid(n), kThreads, 0, st_>>>(dq, dkv, as<T>(dqkv_blk), s, p));
  check_launch("attention_block_grads_add", {(size_t)s.B, (size_t)p.rows, (size_t)s.row});
}

}  // namespace trainer::cuda
