#pragma once
// The compute-backend interface. model/ expresses every piece of math through
// it, on buffers the backend allocated, so a CUDA backend can replace the CPU
// one without touching model/. Matrices are row-major. Linear weights are
// stored [out, in] (as PyTorch does), so a forward product is X * W^T.
//
// Conventions: "_bwd" functions ACCUMULATE into parameter gradients
// (dw, db) and into dx where documented, so gradient accumulation over
// micro-batches and residual branches need no extra adds.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/memory.h"

namespace trainer {

struct AttentionShape {
  int B, T;      // batch, sequence
  int H, KVH;    // query heads, key/value heads (GQA: H % KVH == 0)
  int hd;        // head dimension
  int row;       // floats per token row of the packed q|k|v buffer
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Memory. Buffers are zero-initialised and counted under `kind`.
  virtual float* alloc(size_t n, Mem kind) = 0;
  virtual void free(float* p) = 0;
  virtual const MemoryStats& memory() const = 0;
  virtual void reset_memory_peaks() = 0;
  virtual void zero(float* p, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;
  virtual void to_host(float* host, const float* dev, size_t n) = 0;
  virtual void from_host(float* dev, const float* host, size_t n) = 0;

  // C[M,N] = alpha * op(A) * op(B) + beta * C, with op(A) [M,K], op(B) [K,N].
  virtual void matmul(bool transA, bool transB, int M, int N, int K, float alpha,
                      const float* A, const float* B, float beta, float* C) = 0;
  // y[r,:] += b for every row r.
  virtual void add_bias(float* y, const float* b, int rows, int cols) = 0;
  // db += sum over rows of dy.
  virtual void bias_bwd(float* db, const float* dy, int rows, int cols) = 0;
  // out = a + b (elementwise, n floats).
  virtual void add(float* out, const float* a, const float* b, size_t n) = 0;

  // Token embedding from a vocabulary shard holding token ids
  // [vocab_offset, vocab_offset + vocab_rows): out[r] = wte[tok - offset] for
  // tokens in the shard, zero for the others (a TP all-reduce completes it).
  virtual void embedding_fwd(float* out, const int32_t* tokens, int rows, const float* wte,
                             int vocab_offset, int vocab_rows, int C) = 0;
  // dwte[tok - offset] += dout[r] for tokens in the shard.
  virtual void embedding_bwd(float* dwte, const float* dout, const int32_t* tokens, int rows,
                             int vocab_offset, int vocab_rows, int C) = 0;
  // Learned positions on rows [row_offset, row_offset + rows) of [B*T] token
  // rows: out[r] += wpe[(row_offset + r) % T]; backward dwpe[...] += dout[r].
  virtual void position_fwd(float* out, const float* wpe, int rows, int row_offset, int T,
                            int C) = 0;
  virtual void position_bwd(float* dwpe, const float* dout, int rows, int row_offset, int T,
                            int C) = 0;

  // LayerNorm (bias may be null) and RMSNorm; stats saved for backward.
  virtual void layernorm_fwd(float* out, float* mean, float* rstd, const float* x,
                             const float* w, const float* b, int rows, int C, float eps) = 0;
  // dx += ..., dw += ..., db += ...
  virtual void layernorm_bwd(float* dx, float* dw, float* db, const float* dout,
                             const float* x, const float* w, const float* mean,
                             const float* rstd, int rows, int C) = 0;
  virtual void rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w,
                           int rows, int C, float eps) = 0;
  virtual void rmsnorm_bwd(float* dx, float* dw, const float* dout, const float* x,
                           const float* w, const float* rstd, int rows, int C) = 0;

  // GELU (tanh approximation). out = gelu(x); dx = gelu'(x) * dout (overwrites).
  virtual void gelu_fwd(float* out, const float* x, size_t n) = 0;
  virtual void gelu_bwd(float* dx, const float* x, const float* dout, size_t n) = 0;
  // SwiGLU on a row of [gate(F) | up(F)]: out = silu(gate) * up, [rows, F].
  virtual void swiglu_fwd(float* out, const float* gate_up, int rows, int F) = 0;
  // dgate_up (overwritten) from dout.
  virtual void swiglu_bwd(float* dgate_up, const float* gate_up, const float* dout,
                          int rows, int F) = 0;

  // Rotary embedding applied in place to the q and k heads of a packed q|k|v
  // buffer (rotate-half convention, positions 0..T-1). inverse=true applies
  // the transpose rotation, which is the backward pass.
  virtual void rope(float* qkv, const AttentionShape& s, float theta, bool inverse) = 0;

  // Causal softmax attention over packed q|k|v rows [B*T, row]; out [B*T, H*hd].
  // Flash-style contract: the probabilities are never kept. stats
  // [B,H,T,kAttentionStats] keeps per-row softmax statistics (the row's max
  // and its sum of exponentials; cuDNN's log-sum-exp is max + log(sum)), and
  // the backward rebuilds the probabilities block by block from q, k and
  // them. Memory grows with T, not T^2.
  static constexpr int kAttentionStats = 2;
  // Query rows a kernel works on at once: its scratch is at most two
  // block x T score buffers per thread (what the memory plan counts). At
  // T <= block a head is one block.
  static constexpr int kAttentionBlock = 256;
  virtual void attention_fwd(float* out, float* stats, const float* qkv,
                             const AttentionShape& s) = 0;
  // dqkv (overwritten) from dout.
  virtual void attention_bwd(float* dqkv, const float* dout, const float* qkv,
                             const float* stats, const AttentionShape& s) = 0;

  // Cross entropy over logits [rows, V] that may be one vocabulary shard
  // (token ids [vocab_offset, vocab_offset + V)), in three steps with
  // reductions across shards in between (none when V is the whole vocabulary):
  // 1. row_max: max[r] = max of the row (then all-reduce MAX).
  virtual void row_max(float* max, const float* logits, int rows, int V) = 0;
  // 2. ce_exp_sum: sum[r] = sum exp(logit - max), target[r] = the target's logit
  //    if it is in this shard, else 0 (then all-reduce SUM of both). With
  //    write_exp the logits are replaced by exp(logit - max).
  virtual void ce_exp_sum(float* sum, float* target, float* logits, const int32_t* targets,
                          const float* max, int rows, int V, int vocab_offset,
                          bool write_exp) = 0;
  // 3. ce_finish: losses[r] = log(sum) + max - target; with grad_scale != 0
  //    the exp'd logits become (softmax - onehot) * grad_scale.
  virtual void ce_finish(float* losses, float* logits, const int32_t* targets,
                         const float* max, const float* sum, const float* target, int rows,
                         int V, int vocab_offset, float grad_scale) = 0;

  // Sum of squares of x (accumulated in double, deterministic order).
  virtual double sumsq(const float* x, size_t n) = 0;
  // Sums of squares of many tensors at once, each span adding into
  // sums[span.group] in span order: the gradient norm is one call and one
  // read of `groups` doubles per step, however many tensors there are (a
  // device backend reduces on the device and copies the sums back once,
  // instead of one host round-trip per tensor). sums is host memory.
  struct SumSpan {
    const float* x;
    size_t n;
    int group;
  };
  virtual void sumsq_groups(const std::vector<SumSpan>& spans, double* sums, int groups) = 0;
  // Waits until every operation issued so far has finished. Work is
  // synchronous on the CPU (nothing to wait for); timings that need completed
  // work (step time, the sgemm peak) call it, so they stay true where
  // kernels are queued.
  virtual void synchronize() {}
  // One AdamW step on n parameters (PyTorch's AdamW formula) with gradient
  // g * grad_scale: clipping is folded in rather than a separate pass.
  virtual void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay,
                     float bias_corr1, float bias_corr2, float grad_scale) = 0;

  // Token buffers (int32) for inputs and targets.
  virtual int32_t* alloc_tokens(size_t n) = 0;
  virtual void free_tokens(int32_t* p) = 0;
  virtual void tokens_from_host(int32_t* dev, const int32_t* host, size_t n) = 0;
};

struct BackendOptions {
  std::string kind = "cpu";
  int threads = 1;
};

std::unique_ptr<Backend> make_backend(const BackendOptions& opt);

}  // namespace trainer
