#include "planning/op_meter.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "runtime/elapsed.h"

namespace trainer {

namespace {

std::string dims(std::initializer_list<long> v, const char* sep = "x") {
  std::string s;
  for (long x : v) s += (s.empty() ? "" : sep) + std::to_string(x);
  return s;
}
std::string typed(const std::string& shape, DType dt) { return shape + " " + dtype_name(dt); }
double esize(DType dt) { return (double)dtype_size(dt); }
std::string att_shape(const AttentionShape& s) { return dims({s.B, s.T, s.H, s.KVH, s.hd}); }
// Causal attention: the score and value products over the lower triangle.
double att_flops(const AttentionShape& s) { return 2.0 * s.B * s.H * (double)s.T * s.T * s.hd; }
// One chunk pair of ring attention: the same products, a square of rows x
// rows scores, halved on the causal diagonal; the two kinds cost differently,
// so the shape (a machine profile's key) names which.
std::string pair_shape(const AttentionShape& s, const AttentionPair& p) {
  return dims({s.B, p.rows, s.H, s.KVH, s.hd}) + (p.causal ? " causal" : " full");
}
double pair_flops(const AttentionShape& s, const AttentionPair& p) {
  return (p.causal ? 2.0 : 4.0) * s.B * s.H * (double)p.rows * p.rows * s.hd;
}

}  // namespace

MeteredBackend::MeteredBackend(Backend* inner) : inner_(inner) {}

MeteredBackend::~MeteredBackend() {
  for (auto& [p, n] : maps_) munmap(p, n);
}

template <class F>
void MeteredBackend::op(const char* name, const std::string& shape, double flops, double bytes, F&& run) {
  OpCall c{std::string(name) + " " + shape, name, flops, bytes, 0, phase_};
  if (inner_) {
    inner_->synchronize();
    const auto t0 = Clock::now();
    run();
    inner_->synchronize();
    c.ms = ms_since(t0);
  }
  calls_.push_back(std::move(c));
}

void* MeteredBackend::allocate(size_t bytes, Mem kind, Space space) {
  if (inner_) return allocate_in(*inner_, bytes, kind, space);
  // Untouched anonymous pages: zero, and no RAM until written (never, here).
  const size_t n = bytes ? bytes : 1;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  maps_.push_back({p, n});
  mem_.add(p, bytes, kind);
  return p;
}

void MeteredBackend::release(void* p) {
  if (inner_) return release_in(*inner_, p);
  mem_.remove(p);
  for (size_t i = 0; i < maps_.size(); i++)
    if (maps_[i].first == p) {
      munmap(p, maps_[i].second);
      maps_.erase(maps_.begin() + i);
      return;
    }
}

void MeteredBackend::reset_memory_peaks() {
  if (inner_) inner_->reset_memory_peaks();
  else mem_.reset_peaks();
}

void MeteredBackend::synchronize() {
  if (inner_) inner_->synchronize();
}

void MeteredBackend::zero(Ref p, size_t n) {
  op("zero", typed(dims({(long)n}), p.dt), 0, n * esize(p.dt), [&] { inner_->zero(p, n); });
}
void MeteredBackend::copy(Ref dst, CRef src, size_t n) {
  op("copy", typed(dims({(long)n}), dst.dt), 0, 2 * n * esize(dst.dt), [&] { inner_->copy(dst, src, n); });
}
void MeteredBackend::copy_rows(Ref dst, size_t dst_pitch, CRef src, size_t src_pitch, size_t rows, size_t cols) {
  op("copy_rows", typed(dims({(long)rows, (long)cols}), dst.dt), 0, 2 * rows * cols * esize(dst.dt),
     [&] { inner_->copy_rows(dst, dst_pitch, src, src_pitch, rows, cols); });
}
void MeteredBackend::convert(Ref dst, CRef src, size_t n) {
  op("convert", typed(dims({(long)n}), dst.dt), 0, n * (esize(dst.dt) + esize(src.dt)),
     [&] { inner_->convert(dst, src, n); });
}
// Nothing was computed: fp32 values scattered over [0, 1) by a hash of
// their place (a Mixture-of-Experts router's logits then choose experts
// evenly, as a trained router does, instead of every row the same ones),
// zeros otherwise.
void MeteredBackend::to_host(void* host, CRef src, size_t n) {
  if (inner_) return inner_->to_host(host, src, n);
  if (src.dt != DType::F32) return (void)std::memset(host, 0, n * dtype_size(src.dt));
  float* out = static_cast<float*>(host);
  for (size_t i = 0; i < n; i++) out[i] = (float)((i * 2654435761u) % 1000003u) / 1000003.f;
}
void MeteredBackend::from_host(Ref dst, const void* host, size_t n) {
  if (inner_) inner_->from_host(dst, host, n);
}
void MeteredBackend::matmul(bool tA, bool tB, int M, int N, int K, float alpha, CRef A, CRef B, float beta,
                            Ref C) {
  const std::string shape = std::string(tA ? "T" : "N") + (tB ? "T" : "N") + " " + dims({M, N, K});
  op("matmul", typed(shape, C.dt), 2.0 * M * N * K, ((double)M * K + (double)K * N + 2.0 * M * N) * esize(C.dt),
     [&] { inner_->matmul(tA, tB, M, N, K, alpha, A, B, beta, C); });
}
void MeteredBackend::add_bias(Ref y, CRef b, int rows, int cols) {
  op("add_bias", typed(dims({rows, cols}), y.dt), 0, 2.0 * rows * cols * esize(y.dt),
     [&] { inner_->add_bias(y, b, rows, cols); });
}
void MeteredBackend::bias_bwd(float* db, CRef dy, int rows, int cols) {
  op("bias_bwd", typed(dims({rows, cols}), dy.dt), 0, (double)rows * cols * esize(dy.dt),
     [&] { inner_->bias_bwd(db, dy, rows, cols); });
}
void MeteredBackend::add(Ref out, CRef a, CRef b, size_t n) {
  op("add", typed(dims({(long)n}), out.dt), 0, 3.0 * n * esize(out.dt), [&] { inner_->add(out, a, b, n); });
}
void MeteredBackend::embedding_fwd(Ref out, const int32_t* tokens, int rows, CRef wte, int off, int vrows, int C) {
  op("embedding_fwd", typed(dims({rows, vrows, C}), out.dt), 0, 2.0 * rows * C * esize(out.dt),
     [&] { inner_->embedding_fwd(out, tokens, rows, wte, off, vrows, C); });
}
void MeteredBackend::embedding_bwd(float* dwte, CRef dout, const int32_t* tokens, int rows, int off, int vrows,
                                   int C) {
  op("embedding_bwd", typed(dims({rows, vrows, C}), dout.dt), 0, 3.0 * rows * C * 4,
     [&] { inner_->embedding_bwd(dwte, dout, tokens, rows, off, vrows, C); });
}
void MeteredBackend::position_fwd(Ref out, CRef wpe, int rows, int row_offset, int T, int C) {
  op("position_fwd", typed(dims({rows, T, C}), out.dt), 0, 3.0 * rows * C * esize(out.dt),
     [&] { inner_->position_fwd(out, wpe, rows, row_offset, T, C); });
}
void MeteredBackend::position_bwd(float* dwpe, CRef dout, int rows, int row_offset, int T, int C) {
  op("position_bwd", typed(dims({rows, T, C}), dout.dt), 0, 3.0 * rows * C * 4,
     [&] { inner_->position_bwd(dwpe, dout, rows, row_offset, T, C); });
}
void MeteredBackend::layernorm_fwd(Ref out, float* mean, float* rstd, CRef x, CRef w, CRef b, int rows, int C,
                                   float eps) {
  op("layernorm_fwd", typed(dims({rows, C}), out.dt), 0, 2.0 * rows * C * esize(out.dt),
     [&] { inner_->layernorm_fwd(out, mean, rstd, x, w, b, rows, C, eps); });
}
void MeteredBackend::layernorm_bwd(Ref dx, float* dw, float* db, CRef dout, CRef x, CRef w, const float* mean,
                                   const float* rstd, int rows, int C) {
  op("layernorm_bwd", typed(dims({rows, C}), dx.dt), 0, 4.0 * rows * C * esize(dx.dt),
     [&] { inner_->layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, rows, C); });
}
void MeteredBackend::rmsnorm_fwd(Ref out, float* rstd, CRef x, CRef w, int rows, int C, float eps) {
  op("rmsnorm_fwd", typed(dims({rows, C}), out.dt), 0, 2.0 * rows * C * esize(out.dt),
     [&] { inner_->rmsnorm_fwd(out, rstd, x, w, rows, C, eps); });
}
void MeteredBackend::rmsnorm_bwd(Ref dx, float* dw, CRef dout, CRef x, CRef w, const float* rstd, int rows, int C) {
  op("rmsnorm_bwd", typed(dims({rows, C}), dx.dt), 0, 4.0 * rows * C * esize(dx.dt),
     [&] { inner_->rmsnorm_bwd(dx, dw, dout, x, w, rstd, rows, C); });
}
void MeteredBackend::gelu_fwd(Ref out, CRef x, size_t n) {
  op("gelu_fwd", typed(dims({(long)n}), out.dt), 0, 2.0 * n * esize(out.dt), [&] { inner_->gelu_fwd(out, x, n); });
}
void MeteredBackend::gelu_bwd(Ref dx, CRef x, CRef dout, size_t n) {
  op("gelu_bwd", typed(dims({(long)n}), dx.dt), 0, 3.0 * n * esize(dx.dt),
     [&] { inner_->gelu_bwd(dx, x, dout, n); });
}
void MeteredBackend::swiglu_fwd(Ref out, CRef gate_up, int rows, int F) {
  op("swiglu_fwd", typed(dims({rows, F}), out.dt), 0, 3.0 * rows * F * esize(out.dt),
     [&] { inner_->swiglu_fwd(out, gate_up, rows, F); });
}
void MeteredBackend::swiglu_bwd(Ref dgate_up, CRef gate_up, CRef dout, int rows, int F) {
  op("swiglu_bwd", typed(dims({rows, F}), dgate_up.dt), 0, 5.0 * rows * F * esize(dgate_up.dt),
     [&] { inner_->swiglu_bwd(dgate_up, gate_up, dout, rows, F); });
}
void MeteredBackend::rope(Ref qkv, const AttentionShape& s, const RopeFreqs& freqs, bool inverse) {
  op(inverse ? "rope_bwd" : "rope_fwd", typed(att_shape(s), qkv.dt), 0,
     2.0 * s.B * s.T * (s.H + s.KVH) * s.hd * esize(qkv.dt), [&] { inner_->rope(qkv, s, freqs, inverse); });
}
void MeteredBackend::attention_fwd(Ref out, float* stats, CRef qkv, const AttentionShape& s) {
  op("attention_fwd", typed(att_shape(s), out.dt), att_flops(s), 0,
     [&] { inner_->attention_fwd(out, stats, qkv, s); });
}
void MeteredBackend::attention_bwd(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats,
                                   const AttentionShape& s) {
  op("attention_bwd", typed(att_shape(s), dqkv.dt), 2.5 * att_flops(s), 0,
     [&] { inner_->attention_bwd(dqkv, dout, qkv, out, stats, s); });
}
void MeteredBackend::attention_pair_fwd(float* acc, float* stats, CRef qkv, CRef kv, const AttentionShape& s,
                                        const AttentionPair& p) {
  op("attention_pair_fwd", typed(pair_shape(s, p), qkv.dt), pair_flops(s, p), 0,
     [&] { inner_->attention_pair_fwd(acc, stats, qkv, kv, s, p); });
}
void MeteredBackend::attention_pair_out(Ref out, const float* acc, const float* stats, const AttentionShape& s) {
  op("attention_pair_out", typed(att_shape(s), out.dt), 0, (double)s.B * s.T * s.H * s.hd * (4 + esize(out.dt)),
     [&] { inner_->attention_pair_out(out, acc, stats, s); });
}
void MeteredBackend::attention_pair_bwd(float* dq, float* dkv, CRef dout, CRef qkv, CRef kv, CRef out,
                                        const float* stats, const AttentionShape& s, const AttentionPair& p) {
  op("attention_pair_bwd", typed(pair_shape(s, p), qkv.dt), 2.5 * pair_flops(s, p), 0,
     [&] { inner_->attention_pair_bwd(dq, dkv, dout, qkv, kv, out, stats, s, p); });
}
void MeteredBackend::attention_kv_pack(Ref kv, CRef qkv, const AttentionShape& s) {
  op("attention_kv_pack", typed(att_shape(s), kv.dt), 0, 4.0 * s.B * s.T * s.KVH * s.hd * esize(kv.dt),
     [&] { inner_->attention_kv_pack(kv, qkv, s); });
}
void MeteredBackend::attention_pair_grads(Ref dqkv, const float* dq, const float* dkv, const AttentionShape& s) {
  op("attention_pair_grads", typed(att_shape(s), dqkv.dt), 0, (double)s.B * s.T * s.row * (4 + esize(dqkv.dt)),
     [&] { inner_->attention_pair_grads(dqkv, dq, dkv, s); });
}
void MeteredBackend::ce_row_stats(float* max, float* sum, float* target, const float* logits, const int32_t* targets,
                                  int rows, int V, int vocab_offset) {
  op("ce_row_stats", dims({rows, V}), 0, 4.0 * rows * V,
     [&] { inner_->ce_row_stats(max, sum, target, logits, targets, rows, V, vocab_offset); });
}
void MeteredBackend::ce_rebase(float* sum, const float* max, const float* global_max, int rows) {
  op("ce_rebase", dims({rows}), 0, 12.0 * rows, [&] { inner_->ce_rebase(sum, max, global_max, rows); });
}
void MeteredBackend::ce_finish(float* losses, float* logits, const int32_t* targets, const float* max,
                               const float* sum, const float* target, int rows, int V, int vocab_offset,
                               float grad_scale) {
  op("ce_finish", dims({rows, V}) + (grad_scale != 0 ? " grad" : ""), 0, (grad_scale != 0 ? 8.0 : 0.0) * rows * V,
     [&] { inner_->ce_finish(losses, logits, targets, max, sum, target, rows, V, vocab_offset, grad_scale); });
}
void MeteredBackend::gather_rows(Ref dst, CRef src, int src_rows, const int32_t* index, const float* w, int n,
                                 int cols) {
  op("gather_rows", typed(dims({n, cols}), dst.dt), w ? (double)n * cols : 0, 2.0 * n * cols * esize(dst.dt),
     [&] { inner_->gather_rows(dst, src, src_rows, index, w, n, cols); });
}
void MeteredBackend::combine_rows(Ref out, CRef src, int src_rows, const int32_t* index, const float* w, int rows,
                                  int k, int cols) {
  op("combine_rows", typed(dims({rows, k, cols}), out.dt), 2.0 * rows * k * cols,
     ((double)rows * (k + 2) * cols) * esize(out.dt), [&] { inner_->combine_rows(out, src, src_rows, index, w, rows, k, cols); });
}
void MeteredBackend::row_dots(float* dots, CRef a, CRef b, int b_rows, const int32_t* index, int rows, int k,
                              int cols) {
  op("row_dots", typed(dims({rows, k, cols}), a.dt), 2.0 * rows * k * cols, (double)rows * (k + 1) * cols * esize(a.dt),
     [&] { inner_->row_dots(dots, a, b, b_rows, index, rows, k, cols); });
}
void MeteredBackend::sumsq_groups(const std::vector<SumSpan>& spans, double* sums, int groups) {
  size_t n = 0;
  for (const SumSpan& s : spans) n += s.n;
  if (!inner_) std::fill(sums, sums + groups, 0.0);
  op("sumsq", dims({(long)n}), 0, 4.0 * n, [&] { inner_->sumsq_groups(spans, sums, groups); });
}
void MeteredBackend::adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                           float beta2, float eps, float weight_decay, float bias_corr1, float bias_corr2,
                           float grad_scale, Ref copy) {
  op("adamw", dims({(long)n}) + (copy.p ? " +copy" : ""), 0, 28.0 * n, [&] {
    inner_->adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2, grad_scale, copy);
  });
}

}  // namespace trainer
