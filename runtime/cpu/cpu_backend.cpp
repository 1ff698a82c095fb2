#include "runtime/cpu/cpu_backend.h"

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/f32_args.h"
#include "runtime/units.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <new>
#include <vector>

namespace trainer {

namespace {
// Column blocks for deterministic parameter-gradient reductions over rows:
// each thread owns whole columns and walks the rows in order.
constexpr int kColBlock = 64;
// Fixed chunk for sums: partial sums per chunk, then added in chunk order, so
// the result does not depend on the thread count.
constexpr size_t kSumChunk = 1 << 16;
// Elementwise work is split into fixed chunks handed to the vector kernels.
constexpr size_t kElemChunk = 1 << 14;

template <class F>
void parallel_chunks(size_t n, F f) {
  const size_t nchunk = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < nchunk; k++) f(k * kElemChunk, std::min(n, (k + 1) * kElemChunk));
}
}  // namespace

void set_cpu_threads(int threads) {
  threads = std::max(1, threads);
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
}

CpuBackend::CpuBackend(int threads) : threads_(std::max(1, threads)) {
  set_cpu_threads(threads_);
}

CpuBackend::~CpuBackend() = default;

// Staging buffers are host memory outside the device's categories (on a GPU
// they are pinned host memory, not device memory): not counted.
void* CpuBackend::allocate(size_t bytes_wanted, Mem kind, Space space) {
  const size_t bytes = ((bytes_wanted + 63) / 64) * 64 + 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) {
    char b[200];
    std::snprintf(b, sizeof b, "out of memory: allocating %.1f MB of %s failed (%.1f MB allocated so far); "
                  "`trainer plan RECIPE` shows what each category needs", mib(bytes), mem_name(kind),
                  mib(mem_.stats().total_current));
    throw std::runtime_error(b);
  }
  std::memset(p, 0, bytes_wanted);
  if (space == Space::Device) mem_.add(p, bytes, kind);
  return p;
}
void CpuBackend::release(void* p) {
  if (!p) return;
  mem_.remove(p);
  std::free(p);
}

float* CpuBackend::scratch(size_t n) {
  if (n > scratch_.count()) scratch_ = alloc(n, DType::F32, Mem::Temporaries);
  return scratch_.ref().f32();
}
void CpuBackend::zero(Ref p, size_t n) {
  if (n) std::memset(p.p, 0, n * dtype_size(p.dt));
}
void CpuBackend::copy(Ref dst, CRef src, size_t n) {
  if (dst.dt != src.dt) throw std::logic_error("Backend::copy between element types (use convert)");
  if (n) std::memmove(dst.p, src.p, n * dtype_size(dst.dt));
}
void CpuBackend::copy_rows(Ref dst, size_t dst_pitch, CRef src, size_t src_pitch, size_t rows, size_t cols) {
  if (dst.dt != src.dt) throw std::logic_error("Backend::copy_rows between element types");
  const size_t e = dtype_size(dst.dt);
  for (size_t r = 0; r < rows; r++)
    std::memcpy((char*)dst.p + r * dst_pitch * e, (const char*)src.p + r * src_pitch * e, cols * e);
}
void CpuBackend::convert(Ref dst, CRef src, size_t n) {
  if (dst.dt == src.dt) return copy(dst, src, n);
  if (dst.dt == DType::BF16 && src.dt == DType::F32) return narrow_to(dst.b16(), src.f32(), n);
  if (dst.dt == DType::F32 && src.dt == DType::BF16) return widen_to(dst.f32(), src.b16(), n);
  throw std::logic_error("Backend::convert: unsupported element types");
}
// The blocking copies and synchronize() are counted as host waits (what they
// are on a device); the queued copies are not.
void CpuBackend::to_host(void* host, CRef src, size_t n) {
  count_host_sync();
  if (n) std::memcpy(host, src.p, n * dtype_size(src.dt));
}
void CpuBackend::from_host(Ref dst, const void* host, size_t n) {
  count_host_sync();
  if (n) std::memcpy(dst.p, host, n * dtype_size(dst.dt));
}
void CpuBackend::to_host_async(void* host, CRef src, size_t n, Stream) {
  if (n) std::memcpy(host, src.p, n * dtype_size(src.dt));
}
void CpuBackend::from_host_async(Ref dst, const void* host, size_t n) {
  if (n) std::memcpy(dst.p, host, n * dtype_size(dst.dt));
}

void CpuBackend::f32_matmul(bool transA, bool transB, int M, int N, int K, float alpha,
                        const float* A, const float* B, float beta, float* C) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, transA ? M : K, B,
              transB ? K : N, beta, C, N);
}

void CpuBackend::f32_add_bias(float* y, const float* b, int rows, int cols) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    float* yr = y + (size_t)r * cols;
#pragma omp simd
    for (int c = 0; c < cols; c++) yr[c] += b[c];
  }
}

void CpuBackend::f32_bias_bwd(float* db, const float* dy, int rows, int cols) {
  const int nblk = (cols + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    const int c0 = blk * kColBlock, c1 = std::min(cols, c0 + kColBlock);
    float acc[kColBlock] = {0};
    for (int r = 0; r < rows; r++) {
      const float* dyr = dy + (size_t)r * cols;
      for (int c = c0; c < c1; c++) acc[c - c0] += dyr[c];
    }
    for (int c = c0; c < c1; c++) db[c] += acc[c - c0];
  }
}

void CpuBackend::f32_add(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void CpuBackend::f32_embedding_fwd(float* out, const int32_t* tokens, int rows, const float* wte,
                               int vocab_offset, int vocab_rows, int C) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const int v = tokens[r] - vocab_offset;
    float* o = out + (size_t)r * C;
    if (v >= 0 && v < vocab_rows) std::memcpy(o, wte + (size_t)v * C, C * sizeof(float));
    else std::memset(o, 0, C * sizeof(float));
  }
}

void CpuBackend::f32_embedding_bwd(float* dwte, const float* dout, const int32_t* tokens, int rows,
                               int vocab_offset, int vocab_rows, int C) {
  // Rows of dwte may repeat (same token twice), so walk tokens in order.
  for (int r = 0; r < rows; r++) {
    const int v = tokens[r] - vocab_offset;
    if (v < 0 || v >= vocab_rows) continue;
    float* d = dwte + (size_t)v * C;
    const float* g = dout + (size_t)r * C;
#pragma omp simd
    for (int c = 0; c < C; c++) d[c] += g[c];
  }
}

void CpuBackend::f32_position_fwd(float* out, const float* wpe, int rows, int row_offset, int T,
                              int C) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* p = wpe + (size_t)((row_offset + r) % T) * C;
    float* o = out + (size_t)r * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] += p[c];
  }
}

void CpuBackend::f32_position_bwd(float* dwpe, const float* dout, int rows, int row_offset, int T,
                              int C) {
  // Each position's rows are summed in row order; positions run in parallel.
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    float* d = dwpe + (size_t)t * C;
    const int first = ((t - row_offset) % T + T) % T;  // first local row at position t
    for (int r = first; r < rows; r += T) {
      const float* g = dout + (size_t)r * C;
#pragma omp simd
      for (int c = 0; c < C; c++) d[c] += g[c];
    }
  }
}

void CpuBackend::f32_layernorm_fwd(float* out, float* mean, float* rstd, const float* x,
                               const float* w, const float* b, int rows, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* xr = x + (size_t)r * C;
    float m = 0.f;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++) m += xr[c];
    m /= C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
    v /= C;
    const float s = 1.0f / std::sqrt(v + eps);
    float* o = out + (size_t)r * C;
    if (b) {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = (xr[c] - m) * s * w[c] + b[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = (xr[c] - m) * s * w[c];
    }
    mean[r] = m;
    rstd[r] = s;
  }
}

void CpuBackend::f32_layernorm_bwd(float* dx, float* dw, float* db, const float* dout,
                               const float* x, const float* w, const float* mean,
                               const float* rstd, int rows, int C) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* xr = x + (size_t)r * C;
    const float* g = dout + (size_t)r * C;
    const float m = mean[r], s = rstd[r];
    float a = 0.f, bsum = 0.f;
#pragma omp simd reduction(+ : a, bsum)
    for (int c = 0; c < C; c++) {
      const float dn = g[c] * w[c];
      a += dn;
      bsum += dn * (xr[c] - m) * s;
    }
    a /= C;
    bsum /= C;
    float* d = dx + (size_t)r * C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      const float n = (xr[c] - m) * s;
      d[c] += (g[c] * w[c] - a - n * bsum) * s;
    }
  }
  const int nblk = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    const int c0 = blk * kColBlock, c1 = std::min(C, c0 + kColBlock);
    float aw[kColBlock] = {0}, ab[kColBlock] = {0};
    for (int r = 0; r < rows; r++) {
      const float* xr = x + (size_t)r * C;
      const float* g = dout + (size_t)r * C;
      const float m = mean[r], s = rstd[r];
      for (int c = c0; c < c1; c++) {
        aw[c - c0] += g[c] * (xr[c] - m) * s;
        ab[c - c0] += g[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += aw[c - c0];
      if (db) db[c] += ab[c - c0];
    }
  }
}

void CpuBackend::f32_rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w,
                             int rows, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* xr = x + (size_t)r * C;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
    const float s = 1.0f / std::sqrt(ss / C + eps);
    float* o = out + (size_t)r * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = xr[c] * s * w[c];
    rstd[r] = s;
  }
}

void CpuBackend::f32_rmsnorm_bwd(float* dx, float* dw, const float* dout, const float* x,
                             const float* w, const float* rstd, int rows, int C) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* xr = x + (size_t)r * C;
    const float* g = dout + (size_t)r * C;
    const float s = rstd[r];
    float a = 0.f;
#pragma omp simd reduction(+ : a)
    for (int c = 0; c < C; c++) a += g[c] * w[c] * xr[c] * s;
    a /= C;
    float* d = dx + (size_t)r * C;
#pragma omp simd
    for (int c = 0; c < C; c++) d[c] += (g[c] * w[c] - xr[c] * s * a) * s;
  }
  const int nblk = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    const int c0 = blk * kColBlock, c1 = std::min(C, c0 + kColBlock);
    float aw[kColBlock] = {0};
    for (int r = 0; r < rows; r++) {
      const float* xr = x + (size_t)r * C;
      const float* g = dout + (size_t)r * C;
      for (int c = c0; c < c1; c++) aw[c - c0] += g[c] * xr[c] * rstd[r];
    }
    for (int c = c0; c < c1; c++) dw[c] += aw[c - c0];
  }
}

void CpuBackend::f32_gelu_fwd(float* out, const float* x, size_t n) {
  parallel_chunks(n, [&](size_t a, size_t b) { cpu::gelu_fwd(out + a, x + a, b - a); });
}

void CpuBackend::f32_gelu_bwd(float* dx, const float* x, const float* dout, size_t n) {
  parallel_chunks(n, [&](size_t a, size_t b) { cpu::gelu_bwd(dx + a, x + a, dout + a, b - a); });
}

void CpuBackend::f32_swiglu_fwd(float* out, const float* gate_up, int rows, int F) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* g = gate_up + (size_t)r * 2 * F;
    cpu::swiglu_fwd(out + (size_t)r * F, g, g + F, F);
  }
}

void CpuBackend::f32_swiglu_bwd(float* dgate_up, const float* gate_up, const float* dout,
                            int rows, int F) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* g = gate_up + (size_t)r * 2 * F;
    float* dg = dgate_up + (size_t)r * 2 * F;
    cpu::swiglu_bwd(dg, dg + F, g, g + F, dout + (size_t)r * F, F);
  }
}

void CpuBackend::f32_rope(float* qkv, const AttentionShape& s, const RopeFreqs& freqs, bool inverse) {
  const int half = s.hd / 2;
  float* cs = scratch(2 * (size_t)s.T * half);
  float* sn = cs + (size_t)s.T * half;
  for (int t = 0; t < s.T; t++)
    for (int i = 0; i < half; i++) {
      const double freq = rope_inv_freq(freqs, i, s.hd);
      const int pos = s.t0 + t;
      cs[(size_t)t * half + i] = (float)std::cos(pos * freq);
      sn[(size_t)t * half + i] = (float)(inverse ? -std::sin(pos * freq) : std::sin(pos * freq));
    }
  const int nheads = s.H + s.KVH;  // q heads then k heads; v is not rotated
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < s.B * s.T; bt++) {
    const int t = bt % s.T;
    const float* c = cs + (size_t)t * half;
    const float* sv = sn + (size_t)t * half;
    for (int h = 0; h < nheads; h++) {
      float* x = qkv + (size_t)bt * s.row + (size_t)h * s.hd;
#pragma omp simd
      for (int i = 0; i < half; i++) {
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c[i] - x2 * sv[i];
        x[i + half] = x2 * c[i] + x1 * sv[i];
      }
    }
  }
}

void CpuBackend::ce_row_stats(float* max, float* sum, float* target, const float* logits,
                              const int32_t* targets, int rows, int V, int vocab_offset) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const float* l = logits + (size_t)r * V;
    const int t = targets[r] - vocab_offset;
    target[r] = (t >= 0 && t < V) ? l[t] : 0.f;
    max[r] = cpu::max_of(l, V);  // two reads of a row that stays in cache
    sum[r] = (float)cpu::exp_shift_sum(l, V, max[r]);  // summed in double
  }
}

void CpuBackend::ce_rebase(float* sum, const float* max, const float* global_max, int rows) {
  for (int r = 0; r < rows; r++) sum[r] *= std::exp(max[r] - global_max[r]);
}

void CpuBackend::ce_finish(float* losses, float* logits, const int32_t* targets,
                           const float* max, const float* sum, const float* target, int rows,
                           int V, int vocab_offset, float grad_scale) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    losses[r] = std::log(sum[r]) + max[r] - target[r];
    if (grad_scale == 0.f) continue;
    float* l = logits + (size_t)r * V;
    cpu::exp_shift(l, V, max[r]);
    cpu::scale_inplace(l, grad_scale / sum[r], V);
    const int t = targets[r] - vocab_offset;
    if (t >= 0 && t < V) l[t] -= grad_scale;
  }
}

// Fixed chunks summed in chunk order: the same bits whatever the threads.
double CpuBackend::f32_sumsq(const float* x, size_t n, bool square) {
  const size_t nchunk = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> part(nchunk, 0.0);
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < nchunk; k++) {
    const size_t i0 = k * kSumChunk, i1 = std::min(n, i0 + kSumChunk);
    if (square) {
      part[k] = cpu::sumsq(x + i0, i1 - i0);
    } else {
      double t = 0.0;
      for (size_t i = i0; i < i1; i++) t += x[i];
      part[k] = t;
    }
  }
  double total = 0.0;
  for (double p : part) total += p;
  return total;
}

void CpuBackend::sumsq_groups(const std::vector<SumSpan>& spans, double* sums, int groups) {
  count_host_sync();  // the sums are read on the host
  std::fill(sums, sums + groups, 0.0);
  for (const SumSpan& sp : spans) sums[sp.group] += f32_sumsq(sp.x, sp.n, sp.square);
}

void CpuBackend::adamw(float* p, const float* g, float* m, float* v, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay,
                       float bias_corr1, float bias_corr2, float grad_scale, Ref copy) {
  parallel_chunks(n, [&](size_t a, size_t b) {
    cpu::adamw(p + a, g + a, m + a, v + a, b - a, lr, beta1, beta2, eps, weight_decay,
               bias_corr1, bias_corr2, grad_scale);
    if (copy) convert(copy + a, CRef(p + a), b - a);  // while the chunk is in cache
  });
}

}  // namespace trainer
