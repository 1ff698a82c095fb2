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
#include "runtime/gpu_state.h"
#include "runtime/memory.h"
#include "runtime/rope.h"
#include "runtime/tensor_ref.h"

namespace trainer {

struct AttentionShape {
  int B, T;      // batch, sequence
  int H, KVH;    // query heads, key/value heads (GQA: H % KVH == 0)
  int hd;        // head dimension
  int row;       // floats per token row of the packed q|k|v buffer
  // The position of each sequence's row 0 (rope only): a chunk of a
  // sequence cut by context parallelism starts further on.
  int t0 = 0;
};

// One pair of token chunks of ring attention (context parallelism,
// parallel/context_chunks.h): the local query rows [q0, q0 + rows) of each
// sequence against the key/value rows [k0, k0 + rows) of a block that may be
// another rank's. A block row holds one token's k heads at float k_off and
// its v heads at v_off, kv_row floats apart, kv_T rows per sequence: the
// local packed q|k|v buffer itself (kv_row = row, k_off = H * hd, v_off =
// (H + KVH) * hd), or k|v rows that travelled the ring (kv_row = 2 * KVH *
// hd, k_off = 0, v_off = KVH * hd).
struct AttentionPair {
  int q0, k0, rows;
  bool causal;  // the same chunk: query i sees key j <= i; otherwise every key
  int kv_T, kv_row, k_off, v_off;
};

// An implementation's declaration of one of the operations (runtime/backend_ops.inc).
#define TRAINER_BACKEND_OVERRIDE(ret, name, params) ret name params override;

// Element types: activations, activation gradients and the weights products
// read come as Ref/CRef in the run's compute type (fp32 or bf16); parameter
// gradients, norm and softmax statistics, logits, losses and optimizer state
// are always fp32 (float*). A backend computes bf16 in fp32 and rounds each
// result once; the exception is the CUDA backend's bf16 ring attention,
// whose chunk pairs come out of cuDNN in bf16 (each pair's output and
// gradients rounded once before they are summed in fp32).
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

  // The form in which products read an fp32 operand beside operands of type
  // dt (the LM head's logits gradient, read by two products): the CUDA
  // backend rounds it to dt once, into scratch valid until the next call
  // (cuBLASLt multiplies one input type; matmul would round it per call);
  // the CPU backend reads it as it is (it computes mixed products in fp32).
  virtual CRef product_operand(CRef x, size_t /*n*/, DType /*dt*/) { return x; }
  // Per-row softmax statistics attention_fwd keeps (the row's max and its
  // sum of exponentials).
  static constexpr int kAttentionStats = 2;
  // Query rows a kernel works on at once: its scratch is at most two
  // block x T score buffers per thread (what the memory plan counts). At
  // T <= block a head is one block.
  static constexpr int kAttentionBlock = 256;

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
  double sumsq(const float* x, size_t n) {
    double s = 0;
    sumsq_groups({{x, n, 0}}, &s, 1);
    return s;
  }

  // The operations every backend implements, declared once with what each
  // does (an implementation declares them all the same way, with
  // TRAINER_BACKEND_OVERRIDE):
#define TRAINER_BACKEND_OP(ret, name, params) virtual ret name params = 0;
#include "runtime/backend_ops.inc"

 protected:
  friend class Buffer;
  virtual void* allocate(size_t bytes, Mem kind, Space space) = 0;  // zeroed
  virtual void release(void* p) = 0;
  void count_host_sync() { host_syncs_++; }
  // For a backend that wraps another (planning/op_meter.h's metering one):
  // its allocations go to the wrapped backend.
  static void* allocate_in(Backend& b, size_t bytes, Mem kind, Space space) { return b.allocate(bytes, kind, space); }
  static void release_in(Backend& b, void* p) { b.release(p); }
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

// What the driver says of this node's GPUs (runtime/gpu_state.h), the one
// `be` computes on marked; none, with `missing` saying why, for a backend
// that is not a GPU's or a binary without the CUDA backend.
NodeGpus node_gpus(const Backend& be);

std::unique_ptr<Backend> make_backend(const BackendOptions& opt);

}  // namespace trainer
