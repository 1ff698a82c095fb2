// Elementwise and gather kernels: conversions, adds, biases, activations,
// rotary embedding, embeddings, AdamW. No reductions across threads, so
// their results do not depend on launch sizes.
#include <algorithm>
#include <stdexcept>

#include "runtime/cuda/device_math.cuh"
#include "runtime/cuda/kernels.h"

namespace trainer::cuda {

namespace {
constexpr unsigned kThreads = 256;

// Runs op.run<N>(i) over [0, n): in packs of kPack elements from 0 when
// `packed` (see packable), then the remaining elements one at a time.
template <class Op>
__global__ void map_kernel(Op op, size_t n, bool packed) {
  const size_t whole = packed ? n / kPack * kPack : 0;
  TRAINER_GRID_LOOP(k, whole / kPack) op.template run<kPack>(k * kPack);
  TRAINER_GRID_LOOP(i, n - whole) op.template run<1>(whole + i);
}

template <class D, class S>
struct Convert {
  D* dst;
  const S* src;
  template <int N>
  __device__ void run(size_t i) const {
    float v[N];
    ld_n<N>(src, i, v);
    st_n<N>(dst, i, v);
  }
};

template <class T, class A, class B>
struct Add {
  T* out;
  const A* a;
  const B* b;
  template <int N>
  __device__ void run(size_t i) const {
    float x[N], y[N];
    ld_n<N>(a, i, x);
    ld_n<N>(b, i, y);
    for (int j = 0; j < N; j++) x[j] += y[j];
    st_n<N>(out, i, x);
  }
};

template <class T, class B>
struct AddBias {
  T* y;
  const B* b;
  int cols;
  template <int N>
  __device__ void run(size_t i) const {
    float x[N], c[N];
    ld_n<N>(y, i, x);
    ld_n<N>(b, i % cols, c);
    for (int j = 0; j < N; j++) x[j] += c[j];
    st_n<N>(y, i, x);
  }
};

constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluK = 0.044715f;

template <class T>
struct GeluFwd {
  T* out;
  const T* x;
  template <int N>
  __device__ void run(size_t i) const {
    float v[N];
    ld_n<N>(x, i, v);
    for (int j = 0; j < N; j++) v[j] = 0.5f * v[j] * (1.f + tanhf(kGeluS * (v[j] + kGeluK * v[j] * v[j] * v[j])));
    st_n<N>(out, i, v);
  }
};

template <class T>
struct GeluBwd {
  T* dx;
  const T *x, *dout;
  template <int N>
  __device__ void run(size_t i) const {
    float v[N], d[N];
    ld_n<N>(x, i, v);
    ld_n<N>(dout, i, d);
    for (int j = 0; j < N; j++) {
      const float t = tanhf(kGeluS * (v[j] + kGeluK * v[j] * v[j] * v[j]));
      d[j] *= 0.5f * (1.f + t) + 0.5f * v[j] * (1.f - t * t) * kGeluS * (1.f + 3.f * kGeluK * v[j] * v[j]);
    }
    st_n<N>(dx, i, d);
  }
};

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// gate_up rows are [gate (F) | up (F)]; element i of the output is (row i / F,
// column i % F).
template <class T>
struct SwigluFwd {
  T* out;
  const T* gate_up;
  int F;
  template <int N>
  __device__ void run(size_t i) const {
    const size_t g0 = i / F * 2 * F + i % F;
    float g[N], u[N];
    ld_n<N>(gate_up, g0, g);
    ld_n<N>(gate_up, g0 + F, u);
    for (int j = 0; j < N; j++) g[j] = g[j] * sigmoid(g[j]) * u[j];
    st_n<N>(out, i, g);
  }
};

template <class T>
struct SwigluBwd {
  T* dgu;
  const T *gate_up, *dout;
  int F;
  template <int N>
  __device__ void run(size_t i) const {
    const size_t g0 = i / F * 2 * F + i % F;
    float g[N], u[N], d[N], dg[N], du[N];
    ld_n<N>(gate_up, g0, g);
    ld_n<N>(gate_up, g0 + F, u);
    ld_n<N>(dout, i, d);
    for (int j = 0; j < N; j++) {
      const float sig = sigmoid(g[j]);
      du[j] = d[j] * g[j] * sig;
      dg[j] = d[j] * u[j] * sig * (1.f + g[j] * (1.f - sig));
    }
    st_n<N>(dgu, g0 + F, du);
    st_n<N>(dgu, g0, dg);
  }
};

// One thread per (position, pair i < hd/2): the angle in double, as the CPU
// backend computes it, then rounded to fp32 once for the table.
__global__ void rope_table_kernel(float* table, int T, int hd, RopeFreqs freqs) {
  const int half = hd / 2;
  TRAINER_GRID_LOOP(idx, (size_t)T * half) {
    const int i = idx % half, t = idx / half;
    const double freq = rope_inv_freq(freqs, i, hd);
    table[idx] = (float)cos(t * freq);
    table[(size_t)T * half + idx] = (float)sin(t * freq);
  }
}

// One thread per (token row, rotated head, pair i < hd/2), applied in fp32.
template <class T>
__global__ void rope_kernel(T* qkv, AttentionShape s, const float* table, bool inverse) {
  const int half = s.hd / 2, nheads = s.H + s.KVH;
  TRAINER_GRID_LOOP(idx, (size_t)s.B * s.T * nheads * half) {
    const int i = idx % half;
    const size_t bt = idx / half / nheads;
    const int h = (idx / half) % nheads, t = bt % s.T;
    const float c = table[(size_t)t * half + i], sv = table[((size_t)s.T + t) * half + i];
    const float sn = inverse ? -sv : sv;
    const size_t base = bt * s.row + (size_t)h * s.hd;
    const float x1 = ld(qkv, base + i), x2 = ld(qkv, base + i + half);
    st(qkv, base + i, x1 * c - x2 * sn);
    st(qkv, base + i + half, x2 * c + x1 * sn);
  }
}

template <class T, class W>
__global__ void embedding_fwd_kernel(T* out, const int32_t* tokens, size_t rows, const W* wte, int vocab_offset,
                                     int vocab_rows, int C) {
  TRAINER_GRID_LOOP(i, rows * C) {
    const int v = tokens[i / C] - vocab_offset;
    st(out, i, (v >= 0 && v < vocab_rows) ? ld(wte, (size_t)v * C + i % C) : 0.f);
  }
}

template <class T, class W>
__global__ void position_fwd_kernel(T* out, const W* wpe, size_t rows, int row_offset, int T_, int C) {
  TRAINER_GRID_LOOP(i, rows * C) {
    const size_t r = i / C;
    st(out, i, ld(out, i) + ld(wpe, (size_t)((row_offset + r) % T_) * C + i % C));
  }
}

// Each (position, column) sums its rows in row order.
template <class T>
__global__ void position_bwd_kernel(float* dwpe, const T* dout, int rows, int row_offset, int T_, int C) {
  TRAINER_GRID_LOOP(i, (size_t)T_ * C) {
    const int t = i / C, c = i % C;
    const int first = ((t - row_offset) % T_ + T_) % T_;
    float acc = 0.f;
    for (int r = first; r < rows; r += T_) acc += ld(dout, (size_t)r * C + c);
    dwpe[i] += acc;
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bias_corr1, float bias_corr2,
                             float grad_scale, __nv_bfloat16* copy) {
  const float decay = 1.f - lr * weight_decay, step_size = lr / bias_corr1, bc2_sqrt = sqrtf(bias_corr2);
  TRAINER_GRID_LOOP(i, n) {
    const float gi = g[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
    p[i] = pi;
    if (copy) copy[i] = __float2bfloat16_rn(pi);
  }
}

__global__ void lse_to_stats_kernel(float* stats, const float* lse, size_t rows) {
  TRAINER_GRID_LOOP(i, rows) {
    stats[2 * i] = lse[i];
    stats[2 * i + 1] = 1.f;
  }
}
__global__ void stats_to_lse_kernel(float* lse, const float* stats, size_t rows) {
  TRAINER_GRID_LOOP(i, rows) lse[i] = stats[2 * i] + logf(stats[2 * i + 1]);
}

unsigned grid(size_t n) { return blocks_for(n, kThreads); }

// One thread per pack (and as many as the unpacked remainder needs).
template <class Op>
void map(cudaStream_t s, const char* name, const Op& op, size_t n, bool packed) {
  const size_t threads = packed ? std::max(n / kPack, n % kPack) : n;
  map_kernel<<<grid(threads), kThreads, 0, s>>>(op, n, packed);
  check_launch(name, {n});
}
}  // namespace

void convert(cudaStream_t s, Ref dst, CRef src, size_t n) {
  if (!n) return;
  if (dst.dt == src.dt) {
    check_result(cudaMemcpyAsync(dst.p, src.p, n * dtype_size(dst.dt), cudaMemcpyDeviceToDevice, s),
                 "convert (a same-type copy)", {n});
    return;
  }
  if (dst.dt == DType::I32 || src.dt == DType::I32) throw std::logic_error("cuda::convert: int32 is not converted");
  TRAINER_DISPATCH(dst.dt, D, TRAINER_DISPATCH(src.dt, S, map(s, "convert", Convert<D, S>{as<D>(dst), as<S>(src)}, n,
                                                               packable({dst.p, src.p}))));
}

void add(cudaStream_t s, Ref out, CRef a, CRef b, size_t n) {
  if (!n) return;
  TRAINER_DISPATCH(out.dt, T, TRAINER_DISPATCH(a.dt, A, TRAINER_DISPATCH(b.dt, B, map(s, "add", Add<T, A, B>{
      as<T>(out), as<A>(a), as<B>(b)}, n, packable({out.p, a.p, b.p})))));
}

void add_bias(cudaStream_t s, Ref y, CRef b, int rows, int cols) {
  const size_t n = (size_t)rows * cols;
  if (!n) return;
  TRAINER_DISPATCH(y.dt, T, TRAINER_DISPATCH(b.dt, B, map(s, "add_bias", AddBias<T, B>{as<T>(y), as<B>(b), cols}, n,
                                                          packable({y.p, b.p}, cols))));
}

void gelu_fwd(cudaStream_t s, Ref out, CRef x, size_t n) {
  require_same_type("gelu_fwd", {out.dt, x.dt});
  if (n) TRAINER_DISPATCH(out.dt, T, map(s, "gelu_fwd", GeluFwd<T>{as<T>(out), as<T>(x)}, n, packable({out.p, x.p})));
}
void gelu_bwd(cudaStream_t s, Ref dx, CRef x, CRef dout, size_t n) {
  require_same_type("gelu_bwd", {dx.dt, x.dt, dout.dt});
  if (n)
    TRAINER_DISPATCH(dx.dt, T, map(s, "gelu_bwd", GeluBwd<T>{as<T>(dx), as<T>(x), as<T>(dout)}, n,
                                   packable({dx.p, x.p, dout.p})));
}
void swiglu_fwd(cudaStream_t s, Ref out, CRef gate_up, int rows, int F) {
  require_same_type("swiglu_fwd", {out.dt, gate_up.dt});
  const size_t n = (size_t)rows * F;
  if (n)
    TRAINER_DISPATCH(out.dt, T, map(s, "swiglu_fwd", SwigluFwd<T>{as<T>(out), as<T>(gate_up), F}, n,
                                    packable({out.p, gate_up.p}, F)));
}
void swiglu_bwd(cudaStream_t s, Ref dgate_up, CRef gate_up, CRef dout, int rows, int F) {
  require_same_type("swiglu_bwd", {dgate_up.dt, gate_up.dt, dout.dt});
  const size_t n = (size_t)rows * F;
  if (n)
    TRAINER_DISPATCH(dgate_up.dt, T, map(s, "swiglu_bwd", SwigluBwd<T>{as<T>(dgate_up), as<T>(gate_up), as<T>(dout), F},
                                         n, packable({dgate_up.p, gate_up.p, dout.p}, F)));
}
void rope_table(cudaStream_t s, float* table, int T, int hd, const RopeFreqs& freqs) {
  const size_t n = (size_t)T * (hd / 2);
  if (n) rope_table_kernel<<<grid(n), kThreads, 0, s>>>(table, T, hd, freqs);
  check_launch("rope_table", {(size_t)T, (size_t)hd});
}
void rope(cudaStream_t s, Ref qkv, const AttentionShape& sh, const float* table, bool inverse) {
  const size_t n = (size_t)sh.B * sh.T * (sh.H + sh.KVH) * (sh.hd / 2);
  if (n) TRAINER_DISPATCH(qkv.dt, T, rope_kernel<<<grid(n), kThreads, 0, s>>>(as<T>(qkv), sh, table, inverse));
  check_launch("rope", {(size_t)sh.B, (size_t)sh.T, (size_t)(sh.H + sh.KVH), (size_t)sh.hd});
}

void embedding_fwd(cudaStream_t s, Ref out, const int32_t* tokens, int rows, CRef wte, int vocab_offset,
                   int vocab_rows, int C) {
  const size_t n = (size_t)rows * C;
  if (n)
    TRAINER_DISPATCH(out.dt, T, TRAINER_DISPATCH(wte.dt, W, embedding_fwd_kernel<<<grid(n), kThreads, 0, s>>>(
                                                                as<T>(out), tokens, (size_t)rows, as<W>(wte),
                                                                vocab_offset, vocab_rows, C)));
  check_launch("embedding_fwd", {(size_t)rows, (size_t)C});
}
void position_fwd(cudaStream_t s, Ref out, CRef wpe, int rows, int row_offset, int T_, int C) {
  const size_t n = (size_t)rows * C;
  if (n)
    TRAINER_DISPATCH(out.dt, T, TRAINER_DISPATCH(wpe.dt, W, position_fwd_kernel<<<grid(n), kThreads, 0, s>>>(
                                                                as<T>(out), as<W>(wpe), (size_t)rows, row_offset,
                                                                T_, C)));
  check_launch("position_fwd", {(size_t)rows, (size_t)C});
}
void position_bwd(cudaStream_t s, float* dwpe, CRef dout, int rows, int row_offset, int T_, int C) {
  const size_t n = (size_t)T_ * C;
  if (n && rows)
    TRAINER_DISPATCH(dout.dt, T, position_bwd_kernel<<<grid(n), kThreads, 0, s>>>(dwpe, as<T>(dout), rows,
                                                                                     row_offset, T_, C));
  check_launch("position_bwd", {(size_t)T_, (size_t)C});
}

void adamw(cudaStream_t s, float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bias_corr1, float bias_corr2, float grad_scale,
           Ref copy) {
  if (copy && copy.dt != DType::BF16) throw std::logic_error("cuda::adamw: the compute copy is bf16");
  if (n)
    adamw_kernel<<<grid(n), kThreads, 0, s>>>(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bias_corr1,
                                              bias_corr2, grad_scale, as<__nv_bfloat16>(copy));
  check_launch("adamw", {n});
}

void lse_to_stats(cudaStream_t s, float* stats, const float* lse, size_t rows) {
  if (rows) lse_to_stats_kernel<<<grid(rows), kThreads, 0, s>>>(stats, lse, rows);
  check_launch("lse_to_stats", {rows});
}
void stats_to_lse(cudaStream_t s, float* lse, const float* stats, size_t rows) {
  if (rows) stats_to_lse_kernel<<<grid(rows), kThreads, 0, s>>>(lse, stats, rows);
  check_launch("stats_to_lse", {rows});
}

}  // namespace trainer::cuda
