#include "tests/cuda_cpu/emu_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cuda/kernels.h"

namespace trainer {

namespace {
constexpr size_t kGuard = 64;  // bytes of NaN after every allocation
constexpr cudaStream_t kStream = nullptr;
}  // namespace

EmuBackend::~EmuBackend() { scratch_.reset(); }

void* EmuBackend::allocate(size_t bytes, Mem kind, Space) {
  char* p = static_cast<char*>(std::malloc(bytes + kGuard));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  std::memset(p + bytes, 0xff, kGuard);
  live_[p] = bytes;
  mem_.add(p, bytes, kind);
  return p;
}

void EmuBackend::release(void* p) {
  check_guards("release");
  mem_.remove(p);
  live_.erase(static_cast<char*>(p));
  std::free(p);
}

void EmuBackend::check_guards(const char* op) const {
  for (const auto& [p, bytes] : live_)
    for (size_t i = 0; i < kGuard; i++)
      if ((unsigned char)p[bytes + i] != 0xff)
        throw std::runtime_error(std::string("CUDA CPU tier: ") + op + " wrote " + std::to_string(i) +
                                 " bytes past the end of a buffer of " + std::to_string(bytes) + " bytes");
}

float* EmuBackend::scratch(size_t floats) {
  if (floats > scratch_.count()) scratch_ = alloc(floats, DType::F32, Mem::Temporaries);
  return scratch_.ref().f32();
}

// --- memory: host memory, copied directly ---

void EmuBackend::zero(Ref p, size_t n) { std::memset(p.p, 0, n * dtype_size(p.dt)); }
void EmuBackend::copy(Ref dst, CRef src, size_t n) {
  if (dst.dt != src.dt) throw std::logic_error("Backend::copy between element types (use convert)");
  std::memcpy(dst.p, src.p, n * dtype_size(dst.dt));
}
void EmuBackend::copy_rows(Ref dst, size_t dst_pitch, CRef src, size_t src_pitch, size_t rows, size_t cols) {
  cpu_.copy_rows(dst, dst_pitch, src, src_pitch, rows, cols);  // a cudaMemcpy2DAsync on a GPU: no kernel of ours
}
// (The Mixture-of-Experts rows have no CUDA kernels yet: the CPU's.)
void EmuBackend::gather_rows(Ref dst, CRef src, int src_rows, const int32_t* index, const float* w, int n, int cols) {
  cpu_.gather_rows(dst, src, src_rows, index, w, n, cols);
}
void EmuBackend::combine_rows(Ref out, CRef src, int src_rows, const int32_t* index, const float* w, int rows, int k,
                              int cols) {
  cpu_.combine_rows(out, src, src_rows, index, w, rows, k, cols);
}
void EmuBackend::row_dots(float* dots, CRef a, CRef b, int b_rows, const int32_t* index, int rows, int k, int cols) {
  cpu_.row_dots(dots, a, b, b_rows, index, rows, k, cols);
}
void EmuBackend::to_host(void* host, CRef src, size_t n) { std::memcpy(host, src.p, n * dtype_size(src.dt)); }
void EmuBackend::from_host(Ref dst, const void* host, size_t n) { std::memcpy(dst.p, host, n * dtype_size(dst.dt)); }

// --- the kernels ---

#define EMU_OP(name, ...)  \
  do {                     \
    __VA_ARGS__;           \
    check_guards(#name);   \
  } while (0)

void EmuBackend::convert(Ref dst, CRef src, size_t n) { EMU_OP(convert, cuda::convert(kStream, dst, src, n)); }
void EmuBackend::matmul(bool transA, bool transB, int M, int N, int K, float alpha, CRef A, CRef B, float beta,
                        Ref C) {
  cpu_.matmul(transA, transB, M, N, K, alpha, A, B, beta, C);
}
void EmuBackend::add_bias(Ref y, CRef b, int rows, int cols) { EMU_OP(add_bias, cuda::add_bias(kStream, y, b, rows, cols)); }
void EmuBackend::bias_bwd(float* db, CRef dy, int rows, int cols) {
  EMU_OP(bias_bwd, cuda::bias_bwd(kStream, db, dy, rows, cols, scratch(cuda::colsum_scratch_floats(rows, cols))));
}
void EmuBackend::add(Ref out, CRef a, CRef b, size_t n) { EMU_OP(add, cuda::add(kStream, out, a, b, n)); }

void EmuBackend::embedding_fwd(Ref out, const int32_t* tokens, int rows, CRef wte, int vocab_offset, int vocab_rows,
                               int C) {
  EMU_OP(embedding_fwd, cuda::embedding_fwd(kStream, out, tokens, rows, wte, vocab_offset, vocab_rows, C));
}
void EmuBackend::embedding_bwd(float* dwte, CRef dout, const int32_t* tokens, int rows, int vocab_offset,
                               int vocab_rows, int C) {
  const size_t bytes = cuda::embedding_bwd_scratch_bytes(rows);
  EMU_OP(embedding_bwd, cuda::embedding_bwd(kStream, dwte, dout, tokens, rows, vocab_offset, vocab_rows, C,
                                            scratch((bytes + 3) / 4), bytes));
}
void EmuBackend::position_fwd(Ref out, CRef wpe, int rows, int row_offset, int T, int C) {
  EMU_OP(position_fwd, cuda::position_fwd(kStream, out, wpe, rows, row_offset, T, C));
}
void EmuBackend::position_bwd(float* dwpe, CRef dout, int rows, int row_offset, int T, int C) {
  EMU_OP(position_bwd, cuda::position_bwd(kStream, dwpe, dout, rows, row_offset, T, C));
}
void EmuBackend::layernorm_fwd(Ref out, float* mean, float* rstd, CRef x, CRef w, CRef b, int rows, int C,
                               float eps) {
  EMU_OP(layernorm_fwd, cuda::layernorm_fwd(kStream, out, mean, rstd, x, w, b, rows, C, eps));
}
void EmuBackend::layernorm_bwd(Ref dx, float* dw, float* db, CRef dout, CRef x, CRef w, const float* mean,
                               const float* rstd, int rows, int C) {
  EMU_OP(layernorm_bwd, cuda::layernorm_bwd(kStream, dx, dw, db, dout, x, w, mean, rstd, rows, C,
                                            scratch(cuda::colsum_scratch_floats(rows, C, 2))));
}
void EmuBackend::rmsnorm_fwd(Ref out, float* rstd, CRef x, CRef w, int rows, int C, float eps) {
  EMU_OP(rmsnorm_fwd, cuda::rmsnorm_fwd(kStream, out, rstd, x, w, rows, C, eps));
}
void EmuBackend::rmsnorm_bwd(Ref dx, float* dw, CRef dout, CRef x, CRef w, const float* rstd, int rows, int C) {
  EMU_OP(rmsnorm_bwd, cuda::rmsnorm_bwd(kStream, dx, dw, dout, x, w, rstd, rows, C,
                                        scratch(cuda::colsum_scratch_floats(rows, C))));
}
void EmuBackend::gelu_fwd(Ref out, CRef x, size_t n) { EMU_OP(gelu_fwd, cuda::gelu_fwd(kStream, out, x, n)); }
void EmuBackend::gelu_bwd(Ref dx, CRef x, CRef dout, size_t n) { EMU_OP(gelu_bwd, cuda::gelu_bwd(kStream, dx, x, dout, n)); }
void EmuBackend::swiglu_fwd(Ref out, CRef gate_up, int rows, int F) {
  EMU_OP(swiglu_fwd, cuda::swiglu_fwd(kStream, out, gate_up, rows, F));
}
void EmuBackend::swiglu_bwd(Ref dgate_up, CRef gate_up, CRef dout, int rows, int F) {
  EMU_OP(swiglu_bwd, cuda::swiglu_bwd(kStream, dgate_up, gate_up, dout, rows, F));
}
void EmuBackend::rope(Ref qkv, const AttentionShape& s, const RopeFreqs& freqs, bool inverse) {
  Buffer table = alloc(cuda::rope_table_floats(s.T, s.hd), DType::F32, Mem::Temporaries);
  EMU_OP(rope_table, cuda::rope_table(kStream, table.ref().f32(), s.T, s.hd, freqs));
  EMU_OP(rope, cuda::rope(kStream, qkv, s, table.ref().f32(), inverse));
}

void EmuBackend::attention_fwd(Ref out, float* stats, CRef qkv, const AttentionShape& s) {
  if (qkv.dt != DType::F32) throw std::logic_error("CUDA CPU tier: bf16 attention is cuDNN's, not emulated");
  EMU_OP(attention_fwd, cuda::attention_fwd_f32(kStream, out.f32(), stats, qkv.f32(), s));
}
void EmuBackend::attention_bwd(Ref dqkv, CRef dout, CRef qkv, CRef, const float* stats, const AttentionShape& s) {
  if (qkv.dt != DType::F32) throw std::logic_error("CUDA CPU tier: bf16 attention is cuDNN's, not emulated");
  EMU_OP(attention_bwd, cuda::attention_bwd_f32(kStream, dqkv.f32(), dout.f32(), qkv.f32(), stats, s,
                                                scratch(cuda::attention_bwd_scratch_floats(s))));
}
// bf16 pairs are cuDNN's on a GPU (CudaBackend::attention_pair_fwd/bwd).
// Here the CPU backend's pair op on a fresh state stands in for cuDNN's
// block (its output normalised and rounded to bf16, its log-sum-exp; in the
// backward its gradients from the final log-sum-exp, rounded and packed),
// and our kernels carry it into the ring's state as on a GPU.
void EmuBackend::attention_pair_fwd(float* acc, float* stats, CRef qkv, CRef kv, const AttentionShape& s,
                                    const AttentionPair& p) {
  if (qkv.dt == DType::F32) {
    EMU_OP(attention_pair_fwd, cuda::attention_pair_fwd(kStream, acc, stats, qkv, kv, s, p));
    return;
  }
  const size_t width = (size_t)s.H * s.hd;
  std::vector<float> a((size_t)s.B * s.T * width, 0.f), st((size_t)s.B * s.H * s.T * 2, 0.f);
  for (size_t i = 0; i < st.size(); i += 2) st[i] = -INFINITY;
  cpu_.attention_pair_fwd(a.data(), st.data(), qkv, kv, s, p);
  Buffer blk = alloc((size_t)s.B * p.rows * width, DType::BF16, Mem::Temporaries);
  Buffer lse = alloc((size_t)s.B * s.H * p.rows, DType::F32, Mem::Temporaries);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.H; h++)
      for (int i = 0; i < p.rows; i++) {
        const float* row_st = &st[(((size_t)b * s.H + h) * s.T + p.q0 + i) * 2];
        lse.ref().f32()[((size_t)b * s.H + h) * p.rows + i] = row_st[0] + std::log(row_st[1]);
        for (int e = 0; e < s.hd; e++)
          blk.ref().b16()[((size_t)b * p.rows + i) * width + (size_t)h * s.hd + e] =
              to_bf16(a[((size_t)b * s.T + p.q0 + i) * width + (size_t)h * s.hd + e] / row_st[1]);
      }
  EMU_OP(attention_block_merge, cuda::attention_block_merge(kStream, acc, stats, blk.ref(), lse.ref().f32(), s, p));
}
void EmuBackend::attention_pair_out(Ref out, const float* acc, const float* stats, const AttentionShape& s) {
  EMU_OP(attention_pair_out, cuda::attention_pair_out(kStream, out, acc, stats, s));
}
void EmuBackend::attention_pair_bwd(float* dq, float* dkv, CRef dout, CRef qkv, CRef kv, CRef out, const float* stats,
                                    const AttentionShape& s, const AttentionPair& p) {
  if (qkv.dt == DType::F32) {
    EMU_OP(attention_pair_bwd, cuda::attention_pair_bwd(kStream, dq, dkv, dout, qkv, kv, out, stats, s, p,
                                                        scratch(cuda::attention_pair_bwd_scratch_floats(s, p))));
    return;
  }
  const size_t width = (size_t)s.H * s.hd, kv_row = 2 * (size_t)s.KVH * s.hd;
  Buffer lse = alloc((size_t)s.B * s.H * p.rows, DType::F32, Mem::Temporaries);
  EMU_OP(attention_pair_lse, cuda::attention_pair_lse(kStream, lse.ref().f32(), stats, s, p));
  std::vector<float> st((size_t)s.B * s.H * s.T * 2, 0.f);  // (lse, 1) at the pair's rows: what cuDNN is given
  for (size_t bh = 0; bh < (size_t)s.B * s.H; bh++)
    for (int i = 0; i < p.rows; i++)
      st[(bh * s.T + p.q0 + i) * 2] = lse.ref().f32()[bh * p.rows + i], st[(bh * s.T + p.q0 + i) * 2 + 1] = 1.f;
  std::vector<float> g_q((size_t)s.B * s.T * width, 0.f), g_kv((size_t)s.B * p.kv_T * kv_row, 0.f);
  cpu_.attention_pair_bwd(g_q.data(), g_kv.data(), dout, qkv, kv, out, st.data(), s, p);
  Buffer blk = alloc((size_t)s.B * p.rows * s.row, DType::BF16, Mem::Temporaries);
  for (int b = 0; b < s.B; b++)
    for (int i = 0; i < p.rows; i++)
      for (int c = 0; c < s.row; c++)
        blk.ref().b16()[((size_t)b * p.rows + i) * s.row + c] =
            to_bf16((size_t)c < width ? g_q[((size_t)b * s.T + p.q0 + i) * width + c]
                                      : g_kv[((size_t)b * p.kv_T + p.k0 + i) * kv_row + c - width]);
  EMU_OP(attention_block_grads_add, cuda::attention_block_grads_add(kStream, dq, dkv, blk.ref(), s, p));
}
void EmuBackend::attention_kv_pack(Ref kv, CRef qkv, const AttentionShape& s) {
  EMU_OP(attention_kv_pack, cuda::attention_kv_pack(kStream, kv, qkv, s));
}
void EmuBackend::attention_pair_grads(Ref dqkv, const float* dq, const float* dkv, const AttentionShape& s) {
  EMU_OP(attention_pair_grads, cuda::attention_pair_grads(kStream, dqkv, dq, dkv, s));
}
void EmuBackend::lse_to_stats(float* stats, const float* lse, size_t rows) {
  EMU_OP(lse_to_stats, cuda::lse_to_stats(kStream, stats, lse, rows));
}
void EmuBackend::stats_to_lse(float* lse, const float* stats, size_t rows) {
  EMU_OP(stats_to_lse, cuda::stats_to_lse(kStream, lse, stats, rows));
}

void EmuBackend::ce_row_stats(float* max, float* sum, float* target, const float* logits, const int32_t* targets,
                              int rows, int V, int vocab_offset) {
  EMU_OP(ce_row_stats, cuda::ce_row_stats(kStream, max, sum, target, logits, targets, rows, V, vocab_offset));
}
void EmuBackend::ce_rebase(float* sum, const float* max, const float* global_max, int rows) {
  EMU_OP(ce_rebase, cuda::ce_rebase(kStream, sum, max, global_max, rows));
}
void EmuBackend::ce_finish(float* losses, float* logits, const int32_t* targets, const float* max, const float* sum,
                           const float* target, int rows, int V, int vocab_offset, float grad_scale) {
  EMU_OP(ce_finish,
         cuda::ce_finish(kStream, losses, logits, targets, max, sum, target, rows, V, vocab_offset, grad_scale));
}

void EmuBackend::sumsq_groups(const std::vector<SumSpan>& spans, double* sums, int groups) {
  const std::vector<cuda::SumPiece> pieces = cuda::sum_pieces(spans);
  Buffer table = alloc((pieces.size() * sizeof(cuda::SumPiece) + 3) / 4, DType::F32, Mem::Temporaries);
  std::memcpy(table.ref().p, pieces.data(), pieces.size() * sizeof(cuda::SumPiece));
  Buffer partials = alloc(2 * std::max<size_t>(1, pieces.size()), DType::F32, Mem::Temporaries);
  Buffer out = alloc(2 * (size_t)groups, DType::F32, Mem::Temporaries);
  EMU_OP(sumsq_groups, cuda::sumsq_pieces(kStream, static_cast<const cuda::SumPiece*>(table.ref().p),
                                          (int)pieces.size(), static_cast<double*>(partials.ref().p),
                                          static_cast<double*>(out.ref().p), groups));
  std::memcpy(sums, out.ref().p, groups * sizeof(double));
}

void EmuBackend::adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                       float eps, float weight_decay, float bias_corr1, float bias_corr2, float grad_scale,
                       Ref copy) {
  EMU_OP(adamw, cuda::adamw(kStream, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2,
                            grad_scale, copy));
}

}  // namespace trainer
