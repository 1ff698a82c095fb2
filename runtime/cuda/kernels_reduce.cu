// Kernels with reductions: bias and norm-weight gradients (column sums over
// rows), LayerNorm/RMSNorm, the cross-entropy steps, sums of squares. Every
// sum runs in an order fixed by the shapes alone: a thread walks its rows in
// order, partials are added in chunk order, warps reduce by a fixed shuffle
// tree. No atomics, so reruns are bitwise equal.
#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/kernels.h"

namespace trainer::cuda {

namespace {
constexpr unsigned kColThreads = 128;
constexpr unsigned kRowWarps = 8;  // rows per block in the warp-per-row kernels

unsigned chunks(int rows) { return (rows + kRowChunk - 1) / kRowChunk; }

// partial[chunk, c] = sum over the chunk's rows of f(r, c), `sums` of them
// side by side ([chunk][sum][c]).
template <int Sums, class F>
__global__ void colsum_partial_kernel(float* partial, int rows, int cols, F f) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
  float acc[Sums] = {};
  for (int r = r0; r < r1; r++) f(r, c, acc);
  for (int k = 0; k < Sums; k++) partial[((size_t)blockIdx.y * Sums + k) * cols + c] = acc[k];
}

// dst_k[c] += sum of the partials in chunk order (dst_k may be null).
template <int Sums>
__global__ void colsum_finish_kernel(const float* partial, int nchunks, int cols, float* dst0, float* dst1) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int k = 0; k < Sums; k++) {
    float acc = 0.f;
    for (int ch = 0; ch < nchunks; ch++) acc += partial[((size_t)ch * Sums + k) * cols + c];
    float* d = k == 0 ? dst0 : dst1;
    if (d) d[c] += acc;
  }
}

template <int Sums, class F>
void column_sums(cudaStream_t s, float* scratch, int rows, int cols, F f, float* dst0, float* dst1 = nullptr) {
  if (!rows || !cols) return;
  const dim3 g((cols + kColThreads - 1) / kColThreads, chunks(rows));
  colsum_partial_kernel<Sums><<<g, kColThreads, 0, s>>>(scratch, rows, cols, f);
  check_launch("column sums (partials)", {(size_t)rows, (size_t)cols});
  colsum_finish_kernel<Sums><<<g.x, kColThreads, 0, s>>>(scratch, chunks(rows), cols, dst0, dst1);
  check_launch("column sums (finish)", {(size_t)rows, (size_t)cols});
}

template <class T>
struct BiasTerm {
  const T* dy;
  int cols;
  __device__ void operator()(int r, int c, float* acc) const { acc[0] += ld(dy, (size_t)r * cols + c); }
};

template <class T>
struct LayerNormWeightTerms {
  const T *dout, *x;
  const float *mean, *rstd;
  int C;
  __device__ void operator()(int r, int c, float* acc) const {
    const size_t i = (size_t)r * C + c;
    const float g = ld(dout, i);
    acc[0] += g * (ld(x, i) - mean[r]) * rstd[r];
    acc[1] += g;
  }
};

template <class T>
struct RmsNormWeightTerm {
  const T *dout, *x;
  const float* rstd;
  int C;
  __device__ void operator()(int r, int c, float* acc) const {
    const size_t i = (size_t)r * C + c;
    acc[0] += ld(dout, i) * ld(x, i) * rstd[r];
  }
};

// One warp per row.
template <class T, class W>
__global__ void layernorm_fwd_kernel(T* out, float* mean, float* rstd, const T* x, const W* w, const W* b, int rows,
                                     int C, float eps) {
  const int r = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  const size_t o = (size_t)r * C;
  float m = 0.f;
  for (int c = lane; c < C; c += 32) m += ld(x, o + c);
  m = warp_sum(m) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = ld(x, o + c) - m;
    v += d * d;
  }
  v = warp_sum(v) / C;
  const float s = rsqrtf(v + eps);
  for (int c = lane; c < C; c += 32) {
    const float n = (ld(x, o + c) - m) * s * ld(w, c);
    st(out, o + c, b ? n + ld(b, c) : n);
  }
  if (lane == 0) mean[r] = m, rstd[r] = s;
}

template <class T, class W>
__global__ void layernorm_dx_kernel(T* dx, const T* dout, const T* x, const W* w, const float* mean,
                                    const float* rstd, int rows, int C) {
  const int r = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  const size_t o = (size_t)r * C;
  const float m = mean[r], s = rstd[r];
  float a = 0.f, bs = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float dn = ld(dout, o + c) * ld(w, c);
    a += dn;
    bs += dn * (ld(x, o + c) - m) * s;
  }
  a = warp_sum(a) / C;
  bs = warp_sum(bs) / C;
  for (int c = lane; c < C; c += 32) {
    const float n = (ld(x, o + c) - m) * s;
    st(dx, o + c, ld(dx, o + c) + (ld(dout, o + c) * ld(w, c) - a - n * bs) * s);
  }
}

template <class T, class W>
__global__ void rmsnorm_fwd_kernel(T* out, float* rstd, const T* x, const W* w, int rows, int C, float eps) {
  const int r = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  const size_t o = (size_t)r * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float v = ld(x, o + c);
    ss += v * v;
  }
  const float s = rsqrtf(warp_sum(ss) / C + eps);
  for (int c = lane; c < C; c += 32) st(out, o + c, ld(x, o + c) * s * ld(w, c));
  if (lane == 0) rstd[r] = s;
}

template <class T, class W>
__global__ void rmsnorm_dx_kernel(T* dx, const T* dout, const T* x, const W* w, const float* rstd, int rows, int C) {
  const int r = blockIdx.x * kRowWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  const size_t o = (size_t)r * C;
  const float s = rstd[r];
  float a = 0.f;
  for (int c = lane; c < C; c += 32) a += ld(dout, o + c) * ld(w, c) * ld(x, o + c) * s;
  a = warp_sum(a) / C;
  for (int c = lane; c < C; c += 32)
    st(dx, o + c, ld(dx, o + c) + (ld(dout, o + c) * ld(w, c) - ld(x, o + c) * s * a) * s);
}

unsigned row_blocks(int rows) { return (rows + kRowWarps - 1) / kRowWarps; }

// Cross entropy: one block per row, two passes over the logits (stats, then
// the loss and gradient), as llm.c and Megatron's fused kernels do.
constexpr unsigned kCeThreads = 512;

// Each thread keeps a running max and a sum rescaled when the max grows
// (online softmax), so the row is read once; the threads' pairs are merged
// in a fixed shuffle order.
__global__ void ce_row_stats_kernel(float* max, float* sum, float* target, const float* logits,
                                    const int32_t* targets, int V, int vocab_offset) {
  __shared__ float sh[64];
  const int r = blockIdx.x;
  const float* l = logits + (size_t)r * V;
  float m = -INFINITY, s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float x = l[i];
    if (x > m) {
      s = s * expf(m - x) + 1.f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  block_lse(m, s, sh);
  if (threadIdx.x) return;
  const int t = targets[r] - vocab_offset;
  max[r] = m;
  sum[r] = s;
  target[r] = (t >= 0 && t < V) ? l[t] : 0.f;
}

__global__ void ce_rebase_kernel(float* sum, const float* max, const float* global_max, size_t rows) {
  TRAINER_GRID_LOOP(r, rows) sum[r] *= expf(max[r] - global_max[r]);
}

__global__ void ce_finish_kernel(float* losses, float* logits, const int32_t* targets, const float* max,
                                 const float* sum, const float* target, int V, int vocab_offset, float grad_scale) {
  const int r = blockIdx.x;
  if (threadIdx.x == 0) losses[r] = logf(sum[r]) + max[r] - target[r];
  if (grad_scale == 0.f) return;
  float* l = logits + (size_t)r * V;
  const float a = grad_scale / sum[r], mx = max[r];
  const int t = targets[r] - vocab_offset;
  for (int i = threadIdx.x; i < V; i += blockDim.x) l[i] = expf(l[i] - mx) * a - (i == t ? grad_scale : 0.f);
}

constexpr unsigned kSumThreads = 512;

__global__ void sumsq_piece_kernel(const SumPiece* pieces, double* partials) {
  __shared__ double sh[32];
  const SumPiece p = pieces[blockIdx.x];
  double acc = 0.0;
  for (size_t i = threadIdx.x; i < p.n; i += blockDim.x) acc += p.square ? (double)p.x[i] * (double)p.x[i] : (double)p.x[i];
  acc = warp_sum(acc);
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (unsigned w = 0; w < blockDim.x / 32; w++) t += sh[w];
    partials[blockIdx.x] = t;
  }
}

__global__ void sumsq_groups_kernel(const SumPiece* pieces, int npieces, const double* partials, double* sums,
                                    int groups) {
  const int g = threadIdx.x;
  if (g >= groups) return;
  double t = 0.0;
  for (int i = 0; i < npieces; i++)
    if (pieces[i].group == g) t += partials[i];
  sums[g] = t;
}
}  // namespace

void bias_bwd(cudaStream_t s, float* db, CRef dy, int rows, int cols, float* scratch) {
  TRAINER_DISPATCH(dy.dt, T, column_sums<1>(s, scratch, rows, cols, BiasTerm<T>{as<T>(dy), cols}, db));
}

void layernorm_fwd(cudaStream_t s, Ref out, float* mean, float* rstd, CRef x, CRef w, CRef b, int rows, int C,
                   float eps) {
  if (!rows) return;
  require_same_type("layernorm_fwd", {out.dt, x.dt});
  TRAINER_DISPATCH(out.dt, T, TRAINER_DISPATCH(w.dt, W, layernorm_fwd_kernel<<<row_blocks(rows), kRowWarps * 32, 0, s>>>(
                                                            as<T>(out), mean, rstd, as<T>(x), as<W>(w), as<W>(b),
                                                            rows, C, eps)));
  check_launch("layernorm_fwd", {(size_t)rows, (size_t)C});
}

void layernorm_bwd(cudaStream_t s, Ref dx, float* dw, float* db, CRef dout, CRef x, CRef w, const float* mean,
                   const float* rstd, int rows, int C, float* scratch) {
  if (!rows) return;
  require_same_type("layernorm_bwd", {dx.dt, dout.dt, x.dt});
  TRAINER_DISPATCH(dx.dt, T, {
    TRAINER_DISPATCH(w.dt, W, layernorm_dx_kernel<<<row_blocks(rows), kRowWarps * 32, 0, s>>>(
                                  as<T>(dx), as<T>(dout), as<T>(x), as<W>(w), mean, rstd, rows, C));
    column_sums<2>(s, scratch, rows, C, LayerNormWeightTerms<T>{as<T>(dout), as<T>(x), mean, rstd, C}, dw, db);
  });
  check_launch("layernorm_bwd", {(size_t)rows, (size_t)C});
}

void rmsnorm_fwd(cudaStream_t s, Ref out, float* rstd, CRef x, CRef w, int rows, int C, float eps) {
  if (!rows) return;
  require_same_type("rmsnorm_fwd", {out.dt, x.dt});
  TRAINER_DISPATCH(out.dt, T, TRAINER_DISPATCH(w.dt, W, rmsnorm_fwd_kernel<<<row_blocks(rows), kRowWarps * 32, 0, s>>>(
                                                            as<T>(out), rstd, as<T>(x), as<W>(w), rows, C, eps)));
  check_launch("rmsnorm_fwd", {(size_t)rows, (size_t)C});
}

void rmsnorm_bwd(cudaStream_t s, Ref dx, float* dw, CRef dout, CRef x, CRef w, const float* rstd, int rows, int C,
                 float* scratch) {
  if (!rows) return;
  require_same_type("rmsnorm_bwd", {dx.dt, dout.dt, x.dt});
  TRAINER_DISPATCH(dx.dt, T, {
    TRAINER_DISPATCH(w.dt, W, rmsnorm_dx_kernel<<<row_blocks(rows), kRowWarps * 32, 0, s>>>(
                                  as<T>(dx), as<T>(dout), as<T>(x), as<W>(w), rstd, rows, C));
    column_sums<1>(s, scratch, rows, C, RmsNormWeightTerm<T>{as<T>(dout), as<T>(x), rstd, C}, dw);
  });
  check_launch("rmsnorm_bwd", {(size_t)rows, (size_t)C});
}

void ce_row_stats(cudaStream_t s, float* max, float* sum, float* target, const float* logits,
                  const int32_t* targets, int rows, int V, int vocab_offset) {
  if (rows) ce_row_stats_kernel<<<rows, kCeThreads, 0, s>>>(max, sum, target, logits, targets, V, vocab_offset);
  check_launch("ce_row_stats", {(size_t)rows, (size_t)V});
}
void ce_rebase(cudaStream_t s, float* sum, const float* max, const float* global_max, int rows) {
  if (rows) ce_rebase_kernel<<<blocks_for(rows, 256), 256, 0, s>>>(sum, max, global_max, (size_t)rows);
  check_launch("ce_rebase", {(size_t)rows});
}
void ce_finish(cudaStream_t s, float* losses, float* logits, const int32_t* targets, const float* max,
               const float* sum, const float* target, int rows, int V, int vocab_offset, float grad_scale) {
  if (rows)
    ce_finish_kernel<<<rows, kCeThreads, 0, s>>>(losses, logits, targets, max, sum, target, V, vocab_offset,
                                                 grad_scale);
  check_launch("ce_finish", {(size_t)rows, (size_t)V});
}

void sumsq_pieces(cudaStream_t s, const SumPiece* pieces, int npieces, double* partials, double* sums, int groups) {
  if (npieces) sumsq_piece_kernel<<<npieces, kSumThreads, 0, s>>>(pieces, partials);
  check_launch("sums of squares (pieces)", {(size_t)npieces});
  sumsq_groups_kernel<<<1, 32 * ((groups + 31) / 32), 0, s>>>(pieces, npieces, partials, sums, groups);
  check_launch("sums of squares (groups)", {(size_t)npieces, (size_t)groups});
}

}  // namespace trainer::cuda
