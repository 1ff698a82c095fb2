#pragma once
// The compute-backend interface. model/ expresses every piece of math through
// it, on buffers the backend allocated, so a CUDA backend can replace the CPU
// one without touching model/. Matrices are row-major. Linear weights are
// stored [out, in] (as PyTorch does), so a forward product is X * W^T.
//
// Conventions: "_bwd" functions ACCUMULATE into parameter gradients
// (dw, db) and into dx where documented, so gradient accumulation over
// micro-batches and residual branches need no extra adds.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/memory.h"
#include "runtime/rope.h"
#include "runtime/tensor_ref.h"

namespace trainer {

struct AttentionShape {
  int B, T;      // batch, sequence
  int H, KVH;    // query heads, key/value heads (GQA: H % KVH == 0)
  int hd;        // head dimension
  int row;       // floats per token row of the packed q|k|v buffer
};

// Element types: activations, activation gradients and the weights products
// read come as Ref/CRef in the run's compute type (fp32 or bf16); parameter
// gradients, norm and softmax statistics, logits, losses and optimizer state
// are always fp32 (float*). A backend computes bf16 in fp32 and rounds each
// result once.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The device computed on ("" for the CPU) and its data-sheet dense peak in
  // GFLOP/s for math in `dt` (0: not known; MFU then uses a measured peak).
  virtual std::string device_name() const { return ""; }
  virtual double known_peak_gflops(DType /*dt*/) const { return 0; }

  // Memory. Buffers are zero-initialised and counted under `kind`.
  Buffer alloc(size_t n, DType dt, Mem kind, Space space = Space::Device);
  virtual const MemoryStats& memory() const = 0;
  virtual void reset_memory_peaks() = 0;
  virtual void zero(Ref p, size_t n) = 0;
  // Same element type; convert() changes it (rounding to nearest even).
  virtual void copy(Ref dst, CRef src, size_t n) = 0;
  virtual void convert(Ref dst, CRef src, size_t n) = 0;
  // Explicit copies between backend memory and host memory (n elements of
  // the buffer's type). The only way host code sees backend data.
  virtual void to_host(void* host, CRef src, size_t n) = 0;
  virtual void from_host(Ref dst, const void* host, size_t n) = 0;

  // Streams and events. Work issued on one stream runs in order; an event
  // marks a point in a stream that the host or another stream can wait for.
  // The CPU backend runs everything at once on one stream, so these are
  // no-ops there; they exist so that code written for it orders work as a
  // device needs (compute and communication on separate streams).
  using Stream = int;
  static constexpr Stream kComputeStream = 0, kCommStream = 1;
  // id 0 (a default Event) marks nothing: waiting for it returns at once
  // (e.g. a staging buffer that was never filled). A handle that names no
  // recorded event is an error on every backend.
  struct Event {
    Stream stream = kComputeStream;
    uint64_t id = 0;
  };
  virtual Event record_event(Stream s) { return {s, ++events_}; }
  // Later work on waiter waits for e; the host waits for e.
  virtual void wait_event(Stream /*waiter*/, const Event& e) { check_recorded(e); }
  virtual void synchronize_event(const Event& e) { check_recorded(e); }
  // Waits until every operation issued so far has finished. Timings that
  // need completed work (step time, the sgemm peak) call it, so they stay
  // true where kernels are queued.
  virtual void synchronize() {}

  // How often the host has waited for the backend: blocking copies to and
  // from host memory (to_host, from_host, the sums of sumsq_groups), stream
  // and device synchronisations, event waits that had to wait. Every
  // backend counts the same calls, so a CPU run shows what the model code
  // makes a GPU wait for (metrics.jsonl host_syncs, trainer bench
  // host_syncs_per_step); a GPU adds what only it does (the staged MPI
  // path's copies, events still pending).
  uint64_t host_syncs() const { return host_syncs_; }
  // A copy to host staging memory queued on stream s (after the work already
  // there); it is complete once an event recorded on s after it is. The CPU
  // backend copies at once.
  virtual void to_host_async(void* host, CRef src, size_t n, Stream /*s*/) { to_host(host, src, n); }
  // A copy from host staging memory queued on the compute stream; the host
  // memory must stay as it is until an event recorded after it completes.
  virtual void from_host_async(Ref dst, const void* host, size_t n) { from_host(dst, host, n); }

  // C[M,N] = alpha * op(A) * op(B) + beta * C, with op(A) [M,K], op(B) [K,N].
  virtual void matmul(bool transA, bool transB, int M, int N, int K, float alpha, CRef A, CRef B,
                      float beta, Ref C) = 0;
  // The form in which products read an fp32 operand beside operands of type
  // dt (the LM head's logits gradient, read by two products): the CUDA
  // backend rounds it to dt once, into scratch valid until the next call
  // (cuBLASLt multiplies one input type; matmul would round it per call);
  // the CPU backend reads it as it is (it computes mixed products in fp32).
  virtual CRef product_operand(CRef x, size_t /*n*/, DType /*dt*/) { return x; }
  // y[r,:] += b for every row r.
  virtual void add_bias(Ref y, CRef b, int rows, int cols) = 0;
  // db += sum over rows of dy.
  virtual void bias_bwd(float* db, CRef dy, int rows, int cols) = 0;
  // out = a + b (elementwise, n elements).
  virtual void add(Ref out, CRef a, CRef b, size_t n) = 0;

  // Token embedding from a vocabulary shard holding token ids
  // [vocab_offset, vocab_offset + vocab_rows): out[r] = wte[tok - offset] for
  // tokens in the shard, zero for the others (a TP all-reduce completes it).
  virtual void embedding_fwd(Ref out, const int32_t* tokens, int rows, CRef wte, int vocab_offset,
                             int vocab_rows, int C) = 0;
  // dwte[tok - offset] += dout[r] for tokens in the shard.
  virtual void embedding_bwd(float* dwte, CRef dout, const int32_t* tokens, int rows, int vocab_offset,
                             int vocab_rows, int C) = 0;
  // Learned positions on rows [row_offset, row_offset + rows) of [B*T] token
  // rows: out[r] += wpe[(row_offset + r) % T]; backward dwpe[...] += dout[r].
  virtual void position_fwd(Ref out, CRef wpe, int rows, int row_offset, int T, int C) = 0;
  virtual void position_bwd(float* dwpe, CRef dout, int rows, int row_offset, int T, int C) = 0;

  // LayerNorm (bias may be null) and RMSNorm; stats saved for backward.
  virtual void layernorm_fwd(Ref out, float* mean, float* rstd, CRef x, CRef w, CRef b, int rows, int C,
                             float eps) = 0;
  // dx += ..., dw += ..., db += ...
  virtual void layernorm_bwd(Ref dx, float* dw, float* db, CRef dout, CRef x, CRef w, const float* mean,
                             const float* rstd, int rows, int C) = 0;
  virtual void rmsnorm_fwd(Ref out, float* rstd, CRef x, CRef w, int rows, int C, float eps) = 0;
  virtual void rmsnorm_bwd(Ref dx, float* dw, CRef dout, CRef x, CRef w, const float* rstd, int rows,
                           int C) = 0;

  // GELU (tanh approximation). out = gelu(x); dx = gelu'(x) * dout (overwrites).
  virtual void gelu_fwd(Ref out, CRef x, size_t n) = 0;
  virtual void gelu_bwd(Ref dx, CRef x, CRef dout, size_t n) = 0;
  // SwiGLU on a row of [gate(F) | up(F)]: out = silu(gate) * up, [rows, F].
  virtual void swiglu_fwd(Ref out, CRef gate_up, int rows, int F) = 0;
  // dgate_up (overwritten) from dout.
  virtual void swiglu_bwd(Ref dgate_up, CRef gate_up, CRef dout, int rows, int F) = 0;

  // Rotary embedding applied in place to the q and k heads of a packed q|k|v
  // buffer (rotate-half convention, positions 0..T-1). inverse=true applies
  // the transpose rotation, which is the backward pass.
  virtual void rope(Ref qkv, const AttentionShape& s, const RopeFreqs& freqs, bool inverse) = 0;

  // Causal softmax attention over packed q|k|v rows [B*T, row]; out [B*T, H*hd].
  // Flash-style contract: the probabilities are never kept. stats
  // [B,H,T,kAttentionStats] keeps per-row softmax statistics in fp32 (the
  // row's max and its sum of exponentials; cuDNN's log-sum-exp is max +
  // log(sum)), and the backward rebuilds the probabilities block by block
  // from q, k and them. Memory grows with T, not T^2.
  static constexpr int kAttentionStats = 2;
  // Query rows a kernel works on at once: its scratch is at most two
  // block x T score buffers per thread (what the memory plan counts). At
  // T <= block a head is one block.
  static constexpr int kAttentionBlock = 256;
  virtual void attention_fwd(Ref out, float* stats, CRef qkv, const AttentionShape& s) = 0;
  // dqkv (overwritten) from dout. `out` is the forward's output (fused
  // kernels such as cuDNN's use rowsum(dout * out); the CPU one rebuilds it).
  virtual void attention_bwd(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats,
                             const AttentionShape& s) = 0;

  // Cross entropy over fp32 logits [rows, V] that may be one vocabulary shard
  // (token ids [vocab_offset, vocab_offset + V)), in two passes over the
  // logits (one read, then one read and write) with reductions across shards
  // in between (none when V is the whole vocabulary):
  // 1. ce_row_stats: max[r] = the row's max, sum[r] = sum exp(logit - max[r]),
  //    target[r] = the target's logit if it is in this shard, else 0; the
  //    logits are left as they are. A device backend keeps a running max and
  //    rescales its sum (online softmax), so the row is read once.
  virtual void ce_row_stats(float* max, float* sum, float* target, const float* logits,
                            const int32_t* targets, int rows, int V, int vocab_offset) = 0;
  //    Across shards: all-reduce MAX of max into global_max, ce_rebase, then
  //    all-reduce SUM of sum and target.
  // ce_rebase: sum[r] *= exp(max[r] - global_max[r]), so every shard's sum is
  //    relative to the same max and the sums add.
  virtual void ce_rebase(float* sum, const float* max, const float* global_max, int rows) = 0;
  // 2. ce_finish: losses[r] = log(sum) + max - target; with grad_scale != 0 the
  //    logits become (softmax - onehot) * grad_scale, softmax = exp(logit -
  //    max) / sum (max and sum over the whole vocabulary).
  virtual void ce_finish(float* losses, float* logits, const int32_t* targets,
                         const float* max, const float* sum, const float* target, int rows,
                         int V, int vocab_offset, float grad_scale) = 0;

  // Sums of squares of many fp32 tensors at once, each span adding into
  // sums[span.group] in span order (accumulated in double, deterministic
  // order): the gradient norm is one call and one read of `groups` doubles
  // per step, however many tensors there are (a device backend reduces on
  // the device and copies the sums back once, instead of one host
  // round-trip per tensor). sums is host memory.
  // A span with square = false adds its plain sum instead (the step's loss
  // rides in the same call as the gradient norm: one read for both).
  struct SumSpan {
    const float* x;
    size_t n;
    int group;
    bool square = true;
  };
  virtual void sumsq_groups(const std::vector<SumSpan>& spans, double* sums, int groups) = 0;
  double sumsq(const float* x, size_t n) {
    double s = 0;
    sumsq_groups({{x, n, 0}}, &s, 1);
    return s;
  }
  // One AdamW step on n fp32 master parameters (PyTorch's AdamW formula) with
  // gradient g * grad_scale: clipping is folded in rather than a separate
  // pass. With `copy` (bf16 runs) the updated weights are also written there
  // in its type, in the same pass: the compute copy the products read.
  virtual void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay,
                     float bias_corr1, float bias_corr2, float grad_scale, Ref copy = Ref()) = 0;

 protected:
  friend class Buffer;
  friend class MeteredBackend;  // planning/: forwards allocations to the backend it measures
  virtual void* allocate(size_t bytes, Mem kind, Space space) = 0;  // zeroed
  virtual void release(void* p) = 0;
  void count_host_sync() { host_syncs_++; }
  void check_recorded(const Event& e) const;

 private:
  // Atomic: an async checkpoint's writer thread waits on events too.
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> host_syncs_{0};
};

// A host copy of n fp32 elements of backend memory (tests and tools).
std::vector<float> host_copy(Backend& be, CRef src, size_t n);

struct BackendOptions {
  std::string kind = "cpu";
  int threads = 1;          // CPU threads
  std::string cpu_kernels = "auto";  // CPU: the kernel set ("auto": the widest allowed, cpu::resolve_kernel_set)
  int local_rank = -1;      // CUDA: the rank's index on its node, the launcher's (-1: a single process)
  int ranks_on_node = 1;    // CUDA: ranks sharing the node's GPUs
  bool allow_tf32 = false;  // CUDA: fp32 GEMMs in TF32
  bool deterministic_attention = true;  // CUDA: cuDNN's deterministic attention backward
};

// The backends compiled into this binary ("cpu", and "cuda" when built with
// it) and, for `trainer --version`, the libraries behind them.
std::vector<std::string> compiled_backends();
std::string backend_library_versions();

// The GPUs of this node for the memory pre-flight, before any backend
// exists: the name, free and total bytes of the device this rank will use
// (made current, so the context it creates is the one training uses), and
// the count (all zero without a GPU or without the CUDA backend).
struct DeviceMemory {
  std::string name;
  size_t free = 0, total = 0;
  int devices = 0;
};
DeviceMemory device_memory(int local_rank, int ranks_on_node);

std::unique_ptr<Backend> make_backend(const BackendOptions& opt);

}  // namespace trainer
