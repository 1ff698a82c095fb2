#pragma once
// A Backend whose operations run the CUDA backend's own kernels
// (runtime/cuda/*.cu, compiled for the host against cuda_emu.h) on host
// memory, so the op tests of tests/kernel_cases.h hold them to the CPU
// backend exactly as they hold the CUDA backend on a GPU. What the CUDA
// backend hands to libraries is not emulated: products go to the CPU
// backend (cuBLASLt on a GPU), and bf16 attention (cuDNN) is refused.
// Every allocation is followed by a guard of NaN bytes: a kernel that reads
// past a buffer reads NaN, and one that writes past it fails the check that
// follows every operation.
#include <map>

#include "runtime/cpu/cpu_backend.h"

namespace trainer {

class EmuBackend final : public Backend {
 public:
  EmuBackend() : cpu_(1) {}
  ~EmuBackend() override;
  std::string name() const override { return "cuda-kernels-on-cpu"; }
  const MemoryStats& memory() const override { return mem_.stats(); }
  void reset_memory_peaks() override { mem_.reset_peaks(); }
  void zero(Ref p, size_t n) override;
  void copy(Ref dst, CRef src, size_t n) override;
  void convert(Ref dst, CRef src, size_t n) override;
  void to_host(void* host, CRef src, size_t n) override;
  void from_host(Ref dst, const void* host, size_t n) override;

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
  void ce_row_stats(float* max, float* sum, float* target, const float* logits, const int32_t* targets, int rows,
                    int V, int vocab_offset) override;
  void ce_rebase(float* sum, const float* max, const float* global_max, int rows) override;
  void ce_finish(float* losses, float* logits, const int32_t* targets, const float* max, const float* sum,
                 const float* target, int rows, int V, int vocab_offset, float grad_scale) override;
  void sumsq_groups(const std::vector<SumSpan>& spans, double* sums, int groups) override;
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
             float eps, float weight_decay, float bias_corr1, float bias_corr2, float grad_scale,
             Ref copy = Ref()) override;

  // The cuDNN glue kernels, which have no Backend method of their own.
  void lse_to_stats(float* stats, const float* lse, size_t rows);
  void stats_to_lse(float* lse, const float* stats, size_t rows);

 protected:
  void* allocate(size_t bytes, Mem kind, Space space) override;
  void release(void* p) override;

 private:
  // Throws if an operation wrote into the guard after a buffer.
  void check_guards(const char* op) const;
  float* scratch(size_t floats);

  CpuBackend cpu_;
  MemoryTracker mem_;
  std::map<char*, size_t> live_;  // allocation -> bytes before its guard
  Buffer scratch_;
};

}  // namespace trainer
