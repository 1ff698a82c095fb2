#include "runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda_memory.h"

namespace trainer {

namespace {
constexpr size_t kEventRing = 4096;
}  // namespace

CudaBackend::CudaBackend(const CudaOptions& opt)
    : device_(opt.device), allow_tf32_(opt.allow_tf32), deterministic_attention_(opt.deterministic_attention) {
  CUDA_CHECK(cudaSetDevice(device_));
  info_ = cuda::device_info(device_);
  // Non-blocking: no implicit ordering with the legacy default stream, which
  // nothing of the backend uses (its device-wide ordering deadlocks against
  // NCCL kernels waiting for a peer).
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  alloc_.set_streams(compute_, comm_);
  for (auto& ring : events_) ring.resize(kEventRing, nullptr);
  gemm_workspace_ = alloc(cuda_memory::kGemmWorkspaceBytes / 4, DType::F32, Mem::Temporaries);
  gemm_ = std::make_unique<cuda::LtGemm>(gemm_workspace_.ref().p, gemm_workspace_.bytes(), opt.allow_tf32);
}

CudaBackend::~CudaBackend() {
  cudaDeviceSynchronize();
  // The backend's own buffers go back while the streams their release is
  // ordered on still exist; then the cache goes back to the driver.
  sums_.clear();
  sum_out_.reset(), sum_host_.reset(), gemm_workspace_.reset();
  for (Buffer& b : scratch_) b.reset();
  gemm_.reset();
  sdpa_.reset();
  alloc_.free_cached();
  alloc_.set_streams(nullptr, nullptr);
  for (auto& ring : events_)
    for (cudaEvent_t e : ring)
      if (e) cudaEventDestroy(e);
  cudaStreamDestroy(compute_);
  cudaStreamDestroy(comm_);
}

void* CudaBackend::allocate(size_t bytes, Mem kind, Space space) {
  return space == Space::Staging ? alloc_.allocate_pinned(bytes) : alloc_.allocate(bytes, kind);
}
void CudaBackend::release(void* p) { alloc_.release(p); }

void* CudaBackend::scratch(int slot, size_t bytes) {
  Buffer& b = scratch_[slot];
  if (bytes > b.bytes()) {
    b.reset();
    b = alloc((bytes + 3) / 4, DType::F32, Mem::Temporaries);  // raw bytes, in 4-byte units
  }
  return b.ref().p;
}

cuda::CudnnSdpa& CudaBackend::sdpa() {
  if (!sdpa_) sdpa_ = std::make_unique<cuda::CudnnSdpa>(deterministic_attention_);
  return *sdpa_;
}

// --- memory, copies ---

void CudaBackend::zero(Ref p, size_t n) {
  if (n) CUDA_CHECK(cudaMemsetAsync(p.p, 0, n * dtype_size(p.dt), compute_));
}
void CudaBackend::copy(Ref dst, CRef src, size_t n) {
  if (dst.dt != src.dt) throw std::logic_error("Backend::copy between element types (use convert)");
  if (n) CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, n * dtype_size(dst.dt), cudaMemcpyDefault, compute_));
}
// The Mixture-of-Experts rows (issue 69) have no CUDA kernels yet: the
// recipe rules refuse [moe] with runtime.backend = "cuda" before any runs.
void CudaBackend::gather_rows(Ref, CRef, int, const int32_t*, const float*, int, int) {
  throw std::logic_error("CUDA backend: Mixture-of-Experts rows (gather_rows) are not on the CUDA backend yet");
}
void CudaBackend::combine_rows(Ref, CRef, int, const int32_t*, const float*, int, int, int) {
  throw std::logic_error("CUDA backend: Mixture-of-Experts rows (combine_rows) are not on the CUDA backend yet");
}
void CudaBackend::row_dots(float*, CRef, CRef, int, const int32_t*, int, int, int) {
  throw std::logic_error("CUDA backend: Mixture-of-Experts rows (row_dots) are not on the CUDA backend yet");
}
void CudaBackend::copy_rows(Ref dst, size_t dst_pitch, CRef src, size_t src_pitch, size_t rows, size_t cols) {
  if (dst.dt != src.dt) throw std::logic_error("Backend::copy_rows between element types");
  const size_t e = dtype_size(dst.dt);
  if (!rows || !cols) return;
  // cudaMemcpy2D takes pitches below cudaDevAttrMaxPitch (2^31 bytes): row
  // by row above it (a whole sequence per row at a million tokens).
  if (std::max(dst_pitch, src_pitch) * e < ((size_t)1 << 31))
    return CUDA_CHECK(cudaMemcpy2DAsync(dst.p, dst_pitch * e, src.p, src_pitch * e, cols * e, rows, cudaMemcpyDefault,
                                        compute_));
  for (size_t r = 0; r < rows; r++)
    CUDA_CHECK(cudaMemcpyAsync((char*)dst.p + r * dst_pitch * e, (const char*)src.p + r * src_pitch * e, cols * e,
                               cudaMemcpyDefault, compute_));
}
void CudaBackend::convert(Ref dst, CRef src, size_t n) { cuda::convert(compute_, dst, src, n); }

// Host copies wait for the compute stream: the data must be complete, and
// the caller's host memory must be usable (or reusable) on return.
void CudaBackend::to_host(void* host, CRef src, size_t n) {
  count_host_sync();
  if (!n) return;
  CUDA_CHECK(cudaMemcpyAsync(host, src.p, n * dtype_size(src.dt), cudaMemcpyDefault, compute_));
  CUDA_CHECK(cudaStreamSynchronize(compute_));
}
void CudaBackend::from_host(Ref dst, const void* host, size_t n) {
  count_host_sync();
  if (!n) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.p, host, n * dtype_size(dst.dt), cudaMemcpyDefault, compute_));
  CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaBackend::to_host_async(void* host, CRef src, size_t n, Stream s) {
  if (n) CUDA_CHECK(cudaMemcpyAsync(host, src.p, n * dtype_size(src.dt), cudaMemcpyDeviceToHost, stream(s)));
}

void CudaBackend::from_host_async(Ref dst, const void* host, size_t n) {
  if (n) CUDA_CHECK(cudaMemcpyAsync(dst.p, host, n * dtype_size(dst.dt), cudaMemcpyHostToDevice, compute_));
}

// --- streams and events ---

cudaEvent_t CudaBackend::event_slot(const Event& e) {
  if ((e.stream != kComputeStream && e.stream != kCommStream) || e.id == 0 || e.id > next_event_[e.stream].load())
    throw std::logic_error("CUDA backend: an event handle that was never recorded (stream " +
                           std::to_string(e.stream) + ", id " + std::to_string(e.id) + ")");
  cudaEvent_t& ev = events_[e.stream][e.id % kEventRing];
  if (!ev) CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  return ev;
}
Backend::Event CudaBackend::record_event(Stream s) {
  const Stream st = s == kCommStream ? kCommStream : kComputeStream;
  const Event ev{st, ++next_event_[st]};
  CUDA_CHECK(cudaEventRecord(event_slot(ev), stream(s)));
  return ev;
}
// A default Event (id 0) marks nothing: there is nothing to wait for.
void CudaBackend::wait_event(Stream waiter, const Event& e) {
  if (e.id) CUDA_CHECK(cudaStreamWaitEvent(stream(waiter), event_slot(e), 0));
}
void CudaBackend::synchronize_event(const Event& e) {
  if (event_done(e)) return;  // no wait: not a host sync
  count_host_sync();
  CUDA_CHECK(cudaEventSynchronize(event_slot(e)));
}
bool CudaBackend::event_done(const Event& e) {
  if (!e.id) return true;
  const cudaError_t r = cudaEventQuery(event_slot(e));
  if (r == cudaErrorNotReady) return false;
  CUDA_CHECK(r);
  return true;
}
void CudaBackend::synchronize() {
  count_host_sync();
  CUDA_CHECK(cudaStreamSynchronize(compute_));
  CUDA_CHECK(cudaStreamSynchronize(comm_));
}

// --- GEMM ---

// cuBLASLt multiplies operands of one element type. Where the model mixes
// them (the LM head: fp32 logits gradients with bf16 weights and
// activations), the fp32 operand is rounded to bf16 first, as mixed-precision
// autocast does; the product still accumulates in fp32.
void CudaBackend::matmul(bool transA, bool transB, int M, int N, int K, float alpha, CRef A, CRef B, float beta,
                         Ref C) {
  if (A.dt != B.dt) {
    const bool a_wide = A.dt == DType::F32;
    const size_t n = a_wide ? (size_t)M * K : (size_t)K * N;
    Ref tmp(scratch(kGemmOperand, n * 2), DType::BF16);
    cuda::convert(compute_, tmp, a_wide ? A : B, n);
    (a_wide ? A : B) = tmp;
  }
  gemm_->run(compute_, transA, transB, M, N, K, alpha, A, B, beta, C);
}

CRef CudaBackend::product_operand(CRef x, size_t n, DType dt) {
  if (x.dt != DType::F32 || dt != DType::BF16) return x;
  Ref narrow(scratch(kProductOperand, n * 2), DType::BF16);
  cuda::convert(compute_, narrow, x, n);
  return narrow;
}

void CudaBackend::add_bias(Ref y, CRef b, int rows, int cols) { cuda::add_bias(compute_, y, b, rows, cols); }
void CudaBackend::bias_bwd(float* db, CRef dy, int rows, int cols) {
  cuda::bias_bwd(compute_, db, dy, rows, cols, scratch_f32(kReduce, cuda::colsum_scratch_floats(rows, cols)));
}
void CudaBackend::add(Ref out, CRef a, CRef b, size_t n) { cuda::add(compute_, out, a, b, n); }

// --- embeddings, norms, activations ---

void CudaBackend::embedding_fwd(Ref out, const int32_t* tokens, int rows, CRef wte, int vocab_offset, int vocab_rows,
                                int C) {
  cuda::embedding_fwd(compute_, out, tokens, rows, wte, vocab_offset, vocab_rows, C);
}
void CudaBackend::embedding_bwd(float* dwte, CRef dout, const int32_t* tokens, int rows, int vocab_offset,
                                int vocab_rows, int C) {
  const size_t bytes = cuda::embedding_bwd_scratch_bytes(rows);
  cuda::embedding_bwd(compute_, dwte, dout, tokens, rows, vocab_offset, vocab_rows, C, scratch(kEmbedSort, bytes),
                      bytes);
}
void CudaBackend::position_fwd(Ref out, CRef wpe, int rows, int row_offset, int T, int C) {
  cuda::position_fwd(compute_, out, wpe, rows, row_offset, T, C);
}
void CudaBackend::position_bwd(float* dwpe, CRef dout, int rows, int row_offset, int T, int C) {
  cuda::position_bwd(compute_, dwpe, dout, rows, row_offset, T, C);
}
void CudaBackend::layernorm_fwd(Ref out, float* mean, float* rstd, CRef x, CRef w, CRef b, int rows, int C,
                                float eps) {
  cuda::layernorm_fwd(compute_, out, mean, rstd, x, w, b, rows, C, eps);
}
void CudaBackend::layernorm_bwd(Ref dx, float* dw, float* db, CRef dout, CRef x, CRef w, const float* mean,
                                const float* rstd, int rows, int C) {
  cuda::layernorm_bwd(compute_, dx, dw, db, dout, x, w, mean, rstd, rows, C,
                      scratch_f32(kReduce, cuda::colsum_scratch_floats(rows, C, 2)));
}
void CudaBackend::rmsnorm_fwd(Ref out, float* rstd, CRef x, CRef w, int rows, int C, float eps) {
  cuda::rmsnorm_fwd(compute_, out, rstd, x, w, rows, C, eps);
}
void CudaBackend::rmsnorm_bwd(Ref dx, float* dw, CRef dout, CRef x, CRef w, const float* rstd, int rows, int C) {
  cuda::rmsnorm_bwd(compute_, dx, dw, dout, x, w, rstd, rows, C,
                    scratch_f32(kReduce, cuda::colsum_scratch_floats(rows, C)));
}
void CudaBackend::gelu_fwd(Ref out, CRef x, size_t n) { cuda::gelu_fwd(compute_, out, x, n); }
void CudaBackend::gelu_bwd(Ref dx, CRef x, CRef dout, size_t n) { cuda::gelu_bwd(compute_, dx, x, dout, n); }
void CudaBackend::swiglu_fwd(Ref out, CRef gate_up, int rows, int F) {
  cuda::swiglu_fwd(compute_, out, gate_up, rows, F);
}
void CudaBackend::swiglu_bwd(Ref dgate_up, CRef gate_up, CRef dout, int rows, int F) {
  cuda::swiglu_bwd(compute_, dgate_up, gate_up, dout, rows, F);
}
// The angles come from a table built once per (T, head size, frequencies):
// the rotation of every layer, forward and backward, reads it.
void CudaBackend::rope(Ref qkv, const AttentionShape& s, const RopeFreqs& freqs, bool inverse) {
  if (s.t0 != 0) throw std::logic_error("CUDA backend: rope from a position other than 0 (context parallelism) is not on the CUDA backend yet");
  float* table = scratch_f32(kRopeTable, cuda::rope_table_floats(s.T, s.hd));
  if (rope_key_.T != s.T || rope_key_.hd != s.hd || rope_key_.freqs != freqs) {
    cuda::rope_table(compute_, table, s.T, s.hd, freqs);
    rope_key_ = {s.T, s.hd, freqs};
  }
  cuda::rope(compute_, qkv, s, table, inverse);
}

// --- attention ---

void CudaBackend::attention_fwd(Ref out, float* stats, CRef qkv, const AttentionShape& s) {
  cuda::require_same_type("attention_fwd", {out.dt, qkv.dt});
  if (qkv.dt == DType::F32) return cuda::attention_fwd_f32(compute_, out.f32(), stats, qkv.f32(), s);
  const size_t rows = (size_t)s.B * s.H * s.T;
  float* lse = scratch_f32(kAttnRows, rows);
  sdpa().forward(compute_, out.p, lse, qkv.p, s, [this](size_t b) { return scratch(kAttnWorkspace, b); });
  cuda::lse_to_stats(compute_, stats, lse, rows);
}

void CudaBackend::attention_bwd(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats,
                                const AttentionShape& s) {
  cuda::require_same_type("attention_bwd", {dqkv.dt, dout.dt, qkv.dt, out.dt});
  if (qkv.dt == DType::F32)
    return cuda::attention_bwd_f32(compute_, dqkv.f32(), dout.f32(), qkv.f32(), stats, s,
                                   scratch_f32(kAttnRows, cuda::attention_bwd_scratch_floats(s)));
  const size_t rows = (size_t)s.B * s.H * s.T;
  float* lse = scratch_f32(kAttnRows, rows);
  cuda::stats_to_lse(compute_, lse, stats, rows);
  sdpa().backward(compute_, dqkv.p, dout.p, qkv.p, out.p, lse, s,
                  [this](size_t b) { return scratch(kAttnWorkspace, b); });
}

// Ring attention's chunk pairs (context parallelism). fp32: our own kernels
// (kernels_ring_attention.cu), D of the backward in the attention's row
// scratch. bf16: cuDNN per pair, its output (forward) or packed gradient
// (backward) in the block scratch, its log-sum-exp in the row scratch (a
// chunk's rows, at most the attention's), carried into the fp32 state by our
// kernels.
void CudaBackend::attention_pair_fwd(float* acc, float* stats, CRef qkv, CRef kv, const AttentionShape& s,
                                     const AttentionPair& p) {
  cuda::require_same_type("attention_pair_fwd", {qkv.dt, kv.dt});
  if (qkv.dt == DType::F32) return cuda::attention_pair_fwd(compute_, acc, stats, qkv, kv, s, p);
  cuda::check_attention_pair("attention_pair_fwd", s, p);
  void* blk = scratch(kAttnBlock, (size_t)s.B * p.rows * s.H * s.hd * dtype_size(qkv.dt));
  float* lse = scratch_f32(kAttnRows, (size_t)s.B * s.H * p.rows);
  sdpa().pair_forward(compute_, blk, lse, qkv.p, kv.p, s, p, [this](size_t b) { return scratch(kAttnWorkspace, b); });
  cuda::attention_block_merge(compute_, acc, stats, CRef(blk, qkv.dt), lse, s, p);
}
void CudaBackend::attention_pair_out(Ref out, const float* acc, const float* stats, const AttentionShape& s) {
  cuda::attention_pair_out(compute_, out, acc, stats, s);
}
void CudaBackend::attention_pair_bwd(float* dq, float* dkv, CRef dout, CRef qkv, CRef kv, CRef out,
                                     const float* stats, const AttentionShape& s, const AttentionPair& p) {
  cuda::require_same_type("attention_pair_bwd", {dout.dt, qkv.dt, kv.dt, out.dt});
  if (qkv.dt == DType::F32)
    return cuda::attention_pair_bwd(compute_, dq, dkv, dout, qkv, kv, out, stats, s, p,
                                    scratch_f32(kAttnRows, cuda::attention_pair_bwd_scratch_floats(s, p)));
  cuda::check_attention_pair("attention_pair_bwd", s, p);
  void* blk = scratch(kAttnBlock, (size_t)s.B * p.rows * s.row * dtype_size(qkv.dt));
  float* lse = scratch_f32(kAttnRows, (size_t)s.B * s.H * p.rows);
  cuda::attention_pair_lse(compute_, lse, stats, s, p);
  sdpa().pair_backward(compute_, blk, dout.p, qkv.p, kv.p, out.p, lse, s, p,
                       [this](size_t b) { return scratch(kAttnWorkspace, b); });
  cuda::attention_block_grads_add(compute_, dq, dkv, CRef(blk, qkv.dt), s, p);
}
void CudaBackend::attention_kv_pack(Ref kv, CRef qkv, const AttentionShape& s) {
  cuda::attention_kv_pack(compute_, kv, qkv, s);
}
void CudaBackend::attention_pair_grads(Ref dqkv, const float* dq, const float* dkv, const AttentionShape& s) {
  cuda::attention_pair_grads(compute_, dqkv, dq, dkv, s);
}

// --- cross entropy, norms of gradients, optimizer ---

void CudaBackend::ce_row_stats(float* max, float* sum, float* target, const float* logits, const int32_t* targets,
                               int rows, int V, int vocab_offset) {
  cuda::ce_row_stats(compute_, max, sum, target, logits, targets, rows, V, vocab_offset);
}
void CudaBackend::ce_rebase(float* sum, const float* max, const float* global_max, int rows) {
  cuda::ce_rebase(compute_, sum, max, global_max, rows);
}
void CudaBackend::ce_finish(float* losses, float* logits, const int32_t* targets, const float* max, const float* sum,
                            const float* target, int rows, int V, int vocab_offset, float grad_scale) {
  cuda::ce_finish(compute_, losses, logits, targets, max, sum, target, rows, V, vocab_offset, grad_scale);
}

// The spans are split into pieces of at most kSumPiece elements, one block
// each. Piece tables are kept per set of spans (the gradient spans are the
// same every step; ZeRO-1 alternates between a few sets), so a step uploads
// none: the one host wait is the read of the sums.
CudaBackend::SumTable& CudaBackend::sum_table(const std::vector<SumSpan>& spans) {
  const auto same = [&](const SumTable& t) {
    return std::equal(spans.begin(), spans.end(), t.spans.begin(), t.spans.end(),
                      [](const SumSpan& a, const SumSpan& b) {
        return a.x == b.x && a.n == b.n && a.group == b.group && a.square == b.square;
      });
  };
  for (SumTable& t : sums_)
    if (same(t)) return t;
  if (sums_.size() == kSumTables) sums_.erase(sums_.begin());  // the oldest set
  const std::vector<cuda::SumPiece> pieces = cuda::sum_pieces(spans);
  SumTable t{spans, alloc((std::max<size_t>(1, pieces.size()) * sizeof(cuda::SumPiece) + 3) / 4, DType::F32,
                          Mem::Temporaries),
             alloc(2 * std::max<size_t>(1, pieces.size()), DType::F32, Mem::Temporaries), (int)pieces.size()};
  if (!pieces.empty()) {  // bytes, in 4-byte units
    static_assert(sizeof(cuda::SumPiece) % 4 == 0);
    from_host(Ref(t.pieces.ref().p, DType::F32), pieces.data(), pieces.size() * sizeof(cuda::SumPiece) / 4);
  }
  sums_.push_back(std::move(t));
  return sums_.back();
}

void CudaBackend::sumsq_groups(const std::vector<SumSpan>& spans, double* sums, int groups) {
  SumTable& t = sum_table(spans);
  if (sum_out_.bytes() < (size_t)groups * sizeof(double)) {
    sum_out_ = alloc(2 * (size_t)groups, DType::F32, Mem::Temporaries);  // doubles
    sum_host_ = alloc(2 * (size_t)groups, DType::F32, Mem::Temporaries, Space::Staging);
  }
  cuda::sumsq_pieces(compute_, static_cast<const cuda::SumPiece*>(t.pieces.ref().p), t.count,
                     static_cast<double*>(t.partials.ref().p), static_cast<double*>(sum_out_.ref().p), groups);
  CUDA_CHECK(cudaMemcpyAsync(sum_host_.host(), sum_out_.ref().p, groups * sizeof(double), cudaMemcpyDeviceToHost,
                             compute_));
  count_host_sync();
  CUDA_CHECK(cudaStreamSynchronize(compute_));
  std::memcpy(sums, sum_host_.host(), groups * sizeof(double));
}

void CudaBackend::adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                        float eps, float weight_decay, float bias_corr1, float bias_corr2, float grad_scale,
                        Ref copy) {
  cuda::adamw(compute_, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bias_corr1, bias_corr2, grad_scale,
              copy);
}

}  // namespace trainer
