// The CPU backend's typed entry points: each hands its fp32 kernel fp32 views
// of the arguments (runtime/cpu/f32_args.h), so fp32 calls run the kernels
// directly and bf16 ones widen, compute and round back once.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/f32_args.h"

namespace trainer {

void CpuBackend::matmul(bool transA, bool transB, int M, int N, int K, float alpha, CRef A, CRef B, float beta,
                        Ref C) {
  F32Args f;
  const size_t mn = (size_t)M * N;
  f32_matmul(transA, transB, M, N, K, alpha, f.in(A, (size_t)M * K), f.in(B, (size_t)K * N), beta,
             beta != 0.f ? f.inout(C, mn) : f.out(C, mn));
}

void CpuBackend::add_bias(Ref y, CRef b, int rows, int cols) {
  F32Args f;
  f32_add_bias(f.inout(y, (size_t)rows * cols), f.in(b, cols), rows, cols);
}

void CpuBackend::bias_bwd(float* db, CRef dy, int rows, int cols) {
  F32Args f;
  f32_bias_bwd(db, f.in(dy, (size_t)rows * cols), rows, cols);
}

void CpuBackend::add(Ref out, CRef a, CRef b, size_t n) {
  F32Args f;
  const float *fa = f.in(a, n), *fb = f.in(b, n);
  f32_add(f.out(out, n), fa, fb, n);
}

void CpuBackend::embedding_fwd(Ref out, const int32_t* tokens, int rows, CRef wte, int vocab_offset,
                               int vocab_rows, int C) {
  F32Args f;
  const float* w = f.in(wte, (size_t)vocab_rows * C);
  f32_embedding_fwd(f.out(out, (size_t)rows * C), tokens, rows, w, vocab_offset, vocab_rows, C);
}

void CpuBackend::embedding_bwd(float* dwte, CRef dout, const int32_t* tokens, int rows, int vocab_offset,
                               int vocab_rows, int C) {
  F32Args f;
  f32_embedding_bwd(dwte, f.in(dout, (size_t)rows * C), tokens, rows, vocab_offset, vocab_rows, C);
}

void CpuBackend::position_fwd(Ref out, CRef wpe, int rows, int row_offset, int T, int C) {
  F32Args f;
  const float* w = f.in(wpe, (size_t)T * C);
  f32_position_fwd(f.inout(out, (size_t)rows * C), w, rows, row_offset, T, C);
}

void CpuBackend::position_bwd(float* dwpe, CRef dout, int rows, int row_offset, int T, int C) {
  F32Args f;
  f32_position_bwd(dwpe, f.in(dout, (size_t)rows * C), rows, row_offset, T, C);
}

void CpuBackend::layernorm_fwd(Ref out, float* mean, float* rstd, CRef x, CRef w, CRef b, int rows, int C,
                               float eps) {
  F32Args f;
  const size_t n = (size_t)rows * C;
  const float *fx = f.in(x, n), *fw = f.in(w, C), *fb = f.in(b, C);
  f32_layernorm_fwd(f.out(out, n), mean, rstd, fx, fw, fb, rows, C, eps);
}

void CpuBackend::layernorm_bwd(Ref dx, float* dw, float* db, CRef dout, CRef x, CRef w, const float* mean,
                               const float* rstd, int rows, int C) {
  F32Args f;
  const size_t n = (size_t)rows * C;
  const float *fd = f.in(dout, n), *fx = f.in(x, n), *fw = f.in(w, C);
  f32_layernorm_bwd(f.inout(dx, n), dw, db, fd, fx, fw, mean, rstd, rows, C);
}

void CpuBackend::rmsnorm_fwd(Ref out, float* rstd, CRef x, CRef w, int rows, int C, float eps) {
  F32Args f;
  const size_t n = (size_t)rows * C;
  const float *fx = f.in(x, n), *fw = f.in(w, C);
  f32_rmsnorm_fwd(f.out(out, n), rstd, fx, fw, rows, C, eps);
}

void CpuBackend::rmsnorm_bwd(Ref dx, float* dw, CRef dout, CRef x, CRef w, const float* rstd, int rows,
                             int C) {
  F32Args f;
  const size_t n = (size_t)rows * C;
  const float *fd = f.in(dout, n), *fx = f.in(x, n), *fw = f.in(w, C);
  f32_rmsnorm_bwd(f.inout(dx, n), dw, fd, fx, fw, rstd, rows, C);
}

void CpuBackend::gelu_fwd(Ref out, CRef x, size_t n) {
  F32Args f;
  const float* fx = f.in(x, n);
  f32_gelu_fwd(f.out(out, n), fx, n);
}

void CpuBackend::gelu_bwd(Ref dx, CRef x, CRef dout, size_t n) {
  F32Args f;
  const float *fx = f.in(x, n), *fd = f.in(dout, n);
  f32_gelu_bwd(f.out(dx, n), fx, fd, n);
}

void CpuBackend::swiglu_fwd(Ref out, CRef gate_up, int rows, int F) {
  F32Args f;
  const float* g = f.in(gate_up, (size_t)rows * 2 * F);
  f32_swiglu_fwd(f.out(out, (size_t)rows * F), g, rows, F);
}

void CpuBackend::swiglu_bwd(Ref dgate_up, CRef gate_up, CRef dout, int rows, int F) {
  F32Args f;
  const float *g = f.in(gate_up, (size_t)rows * 2 * F), *d = f.in(dout, (size_t)rows * F);
  f32_swiglu_bwd(f.out(dgate_up, (size_t)rows * 2 * F), g, d, rows, F);
}

void CpuBackend::rope(Ref qkv, const AttentionShape& s, const RopeFreqs& freqs, bool inverse) {
  F32Args f;
  f32_rope(f.inout(qkv, (size_t)s.B * s.T * s.row), s, freqs, inverse);
}

void CpuBackend::attention_fwd(Ref out, float* stats, CRef qkv, const AttentionShape& s) {
  F32Args f;
  const size_t rows = (size_t)s.B * s.T;
  const float* q = f.in(qkv, rows * s.row);
  f32_attention_fwd(f.out(out, rows * s.H * s.hd), stats, q, s);
}

void CpuBackend::attention_bwd(Ref dqkv, CRef dout, CRef qkv, CRef /*out*/, const float* stats,
                               const AttentionShape& s) {
  F32Args f;
  const size_t rows = (size_t)s.B * s.T;
  const float *d = f.in(dout, rows * s.H * s.hd), *q = f.in(qkv, rows * s.row);
  f32_attention_bwd(f.out(dqkv, rows * s.row), d, q, stats, s);
}

void CpuBackend::attention_pair_fwd(float* acc, float* stats, CRef qkv, CRef kv, const AttentionShape& s,
                                    const AttentionPair& p) {
  F32Args f;
  f32_attention_pair_fwd(acc, stats, f.in(qkv, (size_t)s.B * s.T * s.row), f.in(kv, (size_t)s.B * p.kv_T * p.kv_row),
                         s, p);
}

void CpuBackend::attention_pair_out(Ref out, const float* acc, const float* stats, const AttentionShape& s) {
  F32Args f;
  const int width = s.H * s.hd;
  float* o = f.out(out, (size_t)s.B * s.T * width);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.H; h++)
      for (int t = 0; t < s.T; t++) {
        const float inv = 1.f / stats[(((size_t)b * s.H + h) * s.T + t) * kAttentionStats + 1];
        const size_t at = ((size_t)b * s.T + t) * width + (size_t)h * s.hd;
        for (int e = 0; e < s.hd; e++) o[at + e] = acc[at + e] * inv;
      }
}

void CpuBackend::attention_kv_pack(Ref kv, CRef qkv, const AttentionShape& s) {
  if (kv.dt != qkv.dt) throw std::logic_error("attention_kv_pack: k|v rows keep the q|k|v buffer's type");
  const size_t es = dtype_size(qkv.dt), n = (size_t)2 * s.KVH * s.hd, from = (size_t)s.H * s.hd;
  for (size_t t = 0; t < (size_t)s.B * s.T; t++)
    std::memcpy(static_cast<char*>(kv.p) + t * n * es, static_cast<const char*>(qkv.p) + (t * s.row + from) * es,
                n * es);
}

void CpuBackend::attention_pair_grads(Ref dqkv, const float* dq, const float* dkv, const AttentionShape& s) {
  F32Args f;
  const size_t rows = (size_t)s.B * s.T, width = (size_t)s.H * s.hd, kv_row = (size_t)2 * s.KVH * s.hd;
  float* d = f.out(dqkv, rows * s.row);
  for (size_t t = 0; t < rows; t++) {
    std::copy_n(dq + t * width, width, d + t * s.row);
    std::copy_n(dkv + t * kv_row, kv_row, d + t * s.row + width);
  }
}

void CpuBackend::attention_pair_bwd(float* dq, float* dkv, CRef dout, CRef qkv, CRef kv, CRef out,
                                    const float* stats, const AttentionShape& s, const AttentionPair& p) {
  F32Args f;
  const size_t rows = (size_t)s.B * s.T, width = (size_t)s.H * s.hd;
  f32_attention_pair_bwd(dq, dkv, f.in(dout, rows * width), f.in(qkv, rows * s.row),
                         f.in(kv, (size_t)s.B * p.kv_T * p.kv_row), f.in(out, rows * width), stats, s, p);
}

}  // namespace trainer
