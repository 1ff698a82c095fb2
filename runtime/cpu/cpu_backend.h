#pragma once
// CPU backend: OpenBLAS sgemm for matrix products, OpenMP for the rest. Every
// kernel is written for fp32; bf16 arguments are widened, computed in fp32 and
// rounded back once (runtime/cpu/f32_args.h, runtime/cpu/cpu_typed.cpp).
// Every reduction runs in a fixed order that does not depend on timing, so a
// run is bit-identical to a rerun with the same thread count.
#include "runtime/backend.h"

namespace trainer {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads);
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }

  const MemoryStats& memory() const override { return mem_.stats(); }
  void reset_memory_peaks() override { mem_.reset_peaks(); }
  void zero(Ref p, size_t n) override;
  void copy(Ref dst, CRef src, size_t n) override;
  void convert(Ref dst, CRef src, size_t n) override;
  void to_host(void* host, CRef src, size_t n) override;
  void from_host(Ref dst, const void* host, size_t n) override;
  void to_host_async(void* host, CRef src, size_t n, Stream s) override;
  void from_host_async(Ref dst, const void* host, size_t n) override;
  void synchronize() override { count_host_sync(); }

  void matmul(bool transA, bool transB, int M, int N, int K, float alpha, CRef A, CRef B, float beta,
              Ref C) override;
  void add_bias(Ref y, CRef b, int rows, int cols) override;
  void bias_bwd(float* db, CRef dy, int rows, int cols) override;
  void add(Ref out, CRef a, CRef b, size_t n) override;

  void embedding_fwd(Ref out, const int32_t* tokens, int rows, CRef wte, int vocab_offset, int vocab_rows,
                     int C) override;
  void embedding_bwd(float* dwte, CRef dout, const int32_t* tokens, int rows, int vocab_offset, int vocab_rows,
                     int C) override;
  void position_fwd(Ref out, CRef wpe, int rows, int row_offset, int T, int C) override;
  void position_bwd(float* dwpe, CRef dout, int rows, int row_offset, int T, int C) override;

  void layernorm_fwd(Ref out, float* mean, float* rstd, CRef x, CRef w, CRef b, int rows, int C,
                     float eps) override;
  void layernorm_bwd(Ref dx, float* dw, float* db, CRef dout, CRef x, CRef w, const float* mean,
                     const float* rstd, int rows, int C) override;
  void rmsnorm_fwd(Ref out, float* rstd, CRef x, CRef w, int rows, int C, float eps) override;
  void rmsnorm_bwd(Ref dx, float* dw, CRef dout, CRef x, CRef w, const float* rstd, int rows, int C) override;

  void gelu_fwd(Ref out, CRef x, size_t n) override;
  void gelu_bwd(Ref dx, CRef x, CRef dout, size_t n) override;
  void swiglu_fwd(Ref out, CRef gate_up, int rows, int F) override;
  void swiglu_bwd(Ref dgate_up, CRef gate_up, CRef dout, int rows, int F) override;
  void rope(Ref qkv, const AttentionShape& s, const RopeFreqs& freqs, bool inverse) override;

  void attention_fwd(Ref out, float* stats, CRef qkv, const AttentionShape& s) override;
  void attention_bwd(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats,
                     const AttentionShape& s) override;
  // Query rows per attention block: each thread holds a block x T slice of
  // scores (two in backward). At T <= block the whole head is one block, the
  // same products as an unblocked kernel. Tests lower it to reach the
  // multi-block path on short sequences.
  void set_attention_block(int rows) { attention_block_ = rows; }
  int attention_block() const { return attention_block_; }

  void ce_row_stats(float* max, float* sum, float* target, const float* logits,
                    const int32_t* targets, int rows, int V, int vocab_offset) override;
  void ce_rebase(float* sum, const float* max, const float* global_max, int rows) override;
  void ce_finish(float* losses, float* logits, const int32_t* targets, const float* max,
                 const float* sum, const float* target, int rows, int V, int vocab_offset,
                 float grad_scale) override;

  void sumsq_groups(const std::vector<SumSpan>& spans, double* sums, int groups) override;
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, float bias_corr1,
             float bias_corr2, float grad_scale, Ref copy = Ref()) override;

 protected:
  void* allocate(size_t bytes, Mem kind, Space space) override;
  void release(void* p) override;

 private:
  // The fp32 kernels (runtime/cpu/cpu_backend.cpp, cpu_attention.cpp).
  void f32_matmul(bool transA, bool transB, int M, int N, int K, float alpha, const float* A,
                  const float* B, float beta, float* C);
  void f32_add_bias(float* y, const float* b, int rows, int cols);
  void f32_bias_bwd(float* db, const float* dy, int rows, int cols);
  void f32_add(float* out, const float* a, const float* b, size_t n);
  void f32_embedding_fwd(float* out, const int32_t* tokens, int rows, const float* wte, int vocab_offset,
                         int vocab_rows, int C);
  void f32_embedding_bwd(float* dwte, const float* dout, const int32_t* tokens, int rows, int vocab_offset,
                         int vocab_rows, int C);
  void f32_position_fwd(float* out, const float* wpe, int rows, int row_offset, int T, int C);
  void f32_position_bwd(float* dwpe, const float* dout, int rows, int row_offset, int T, int C);
  void f32_layernorm_fwd(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                         int rows, int C, float eps);
  void f32_layernorm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                         const float* mean, const float* rstd, int rows, int C);
  void f32_rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int rows, int C, float eps);
  void f32_rmsnorm_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w,
                       const float* rstd, int rows, int C);
  void f32_gelu_fwd(float* out, const float* x, size_t n);
  void f32_gelu_bwd(float* dx, const float* x, const float* dout, size_t n);
  void f32_swiglu_fwd(float* out, const float* gate_up, int rows, int F);
  void f32_swiglu_bwd(float* dgate_up, const float* gate_up, const float* dout, int rows, int F);
  void f32_rope(float* qkv, const AttentionShape& s, const RopeFreqs& freqs, bool inverse);
  void f32_attention_fwd(float* out, float* stats, const float* qkv, const AttentionShape& s);
  void f32_attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* stats,
                         const AttentionShape& s);
  double f32_sumsq(const float* x, size_t n, bool square = true);
  // A scratch buffer of at least n floats kept between calls (attention).
  float* scratch(size_t n);

  int threads_;
  int attention_block_ = kAttentionBlock;
  MemoryTracker mem_;
  Buffer scratch_;  // after mem_: it is released while mem_ still exists
};

// Sets OpenBLAS and OpenMP thread counts for this process.
void set_cpu_threads(int threads);

}  // namespace trainer
