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
  // Every operation of runtime/backend_ops.inc.
#define TRAINER_BACKEND_OP TRAINER_BACKEND_OVERRIDE
#include "runtime/backend_ops.inc"
  void to_host_async(void* host, CRef src, size_t n, Stream s) override;
  void from_host_async(Ref dst, const void* host, size_t n) override;
  void synchronize() override { count_host_sync(); }

  // Query rows per attention block: each thread holds a block x T slice of
  // scores (two in backward). At T <= block the whole head is one block, the
  // same products as an unblocked kernel. Tests lower it to reach the
  // multi-block path on short sequences.
  void set_attention_block(int rows) { attention_block_ = rows; }
  int attention_block() const { return attention_block_; }

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
  void f32_attention_pair_fwd(float* acc, float* stats, const float* qkv, const float* kv, const AttentionShape& s,
                              const AttentionPair& p);
  void f32_attention_pair_bwd(float* dq, float* dkv, const float* dout, const float* qkv, const float* kv,
                              const float* out, const float* stats, const AttentionShape& s, const AttentionPair& p);
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
