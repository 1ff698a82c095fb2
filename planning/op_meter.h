#pragma once
// A backend that records every op the model issues, with its shape, and
// optionally runs and times it on a real backend. It is how the cost model
// learns what a layout computes without a second description of the model:
// the Transformer itself runs on it.
//
//   trace mode (inner = null): nothing is computed; buffers are untouched
//     virtual memory (mmap'd without reserving), so tracing a large model's
//     chunk costs neither time nor RAM. `trainer plan --search` uses it.
//   timing mode (inner = a real backend): each op runs there and its wall
//     time is recorded (the device synchronized around it). `trainer
//     calibrate` uses it to measure the ops the model really issues.
//
// An op's key names its kind, shape and element type; the same key costs
// the same wherever it occurs, which is what lets a profile measured on one
// layer price every layer of every layout with that shard shape.
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace trainer {

// PerStep: once per optimizer step (after the last backward), not per micro-batch.
enum class OpPhase { Forward, Backward, PerStep };

struct OpCall {
  std::string key;    // "matmul NT 256x576x192 f32"
  const char* name;   // "matmul"
  double flops = 0;   // matrix products and attention: multiply-adds x 2
  double bytes = 0;   // elementwise ops: bytes read and written
  double ms = 0;      // timing mode only
  OpPhase phase = OpPhase::Forward;
};

class MeteredBackend final : public Backend {
 public:
  explicit MeteredBackend(Backend* inner = nullptr);
  ~MeteredBackend() override;
  void set_phase(OpPhase p) { phase_ = p; }
  const std::vector<OpCall>& calls() const { return calls_; }
  void clear_calls() { calls_.clear(); }
  bool timing() const { return inner_ != nullptr; }

  std::string name() const override { return "metered"; }
  std::string device_name() const override { return inner_ ? inner_->device_name() : ""; }
  const MemoryStats& memory() const override { return inner_ ? inner_->memory() : mem_.stats(); }
  void reset_memory_peaks() override;
  void zero(Ref p, size_t n) override;
  void copy(Ref dst, CRef src, size_t n) override;
  void convert(Ref dst, CRef src, size_t n) override;
  void to_host(void* host, CRef src, size_t n) override;
  void from_host(Ref dst, const void* host, size_t n) override;
  void synchronize() override;
  CRef product_operand(CRef x, size_t n, DType dt) override { return inner_ ? inner_->product_operand(x, n, dt) : x; }
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

 protected:
  void* allocate(size_t bytes, Mem kind, Space space) override;
  void release(void* p) override;

 private:
  // Records one call (key = name + " " + shape) and, in timing mode, runs
  // and times it.
  template <class F>
  void op(const char* name, const std::string& shape, double flops, double bytes, F&& run);
  Backend* inner_;
  OpPhase phase_ = OpPhase::Forward;
  std::vector<OpCall> calls_;
  MemoryTracker mem_;  // trace mode
  std::vector<std::pair<void*, size_t>> maps_;
};

}  // namespace trainer
