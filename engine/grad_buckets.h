#pragma once
// The data-parallel gradient reduction in buckets that start while the
// backward still runs (as PyTorch DDP, Megatron and torchtitan do).
//
// Each chunk's gradient buffer is cut, from its end (the head's and last
// layers' gradients, the first to be final in a backward), into buckets of
// about parallel.dp_bucket_mb. During the step's last backward of a chunk,
// the Transformer's hook says from which offset on its gradients are final;
// every bucket lying there starts its all-reduce at once (in the compute
// type: bf16 runs send bf16 through the wire buffer), and the outstanding
// ones are tested, which makes MPI progress them while the backward goes on.
// Tensors whose gradients still change after the backward are held back and
// reduced with whatever has not started yet in finish(): a tied embedding's
// copies (summed over the first and last stage first) and, under sequence
// parallelism, the replicated tensors whose partial gradients are summed over
// TP. Without overlap every bucket starts in finish(), so results are the
// same either way.
#include <chrono>
#include <functional>
#include <vector>

#include "engine/grad_reduce.h"

namespace trainer {

class GradBuckets {
 public:
  // held_back(p): whether a tensor's gradient changes after the backward.
  // elsewhere(p): whether another reduction sums it (not in any bucket).
  // wire: bf16 runs' wire buffer (all chunks' gradients back to back), else null.
  GradBuckets(Backend& be, Chunks& chunks, DataComm& dp, Buffer* wire, size_t bucket_bytes,
              const std::function<bool(const ParamInfo&)>& held_back,
              const std::function<bool(const ParamInfo&)>& elsewhere = {});

  // Before a step's schedule: nothing started.
  void begin_step();
  // From chunk c's last backward: its gradients at offsets >= from are final.
  void grads_final(int chunk, size_t from);
  // After the schedule and the replica reductions: starts the rest, waits
  // for all, widens bf16 back. The time spent here is the step's exposed
  // data-parallel communication.
  void finish();

  double exposed_ms() const { return exposed_ms_; }  // time finish() took this step
  double span_ms() const { return last_done_ms_; }   // first start to the last completion seen

 private:
  struct Segment {
    size_t lo, n;  // in the chunk's gradient buffer
  };
  struct Bucket {
    int chunk = 0;
    size_t lo = 0;  // the lowest offset it covers: ready when the hook reaches it
    std::vector<Segment> segments;
    std::vector<DataComm::Handle> handles;
    bool held = false;  // changes after the backward: started in finish() only
    bool started = false, done = false;
  };
  void start(Bucket& b);
  void poll();
  Ref travels(const Bucket& b, const Segment& s) const;
  Ref grad(const Bucket& b, const Segment& s) const;

  Backend& be_;
  Chunks& chunks_;
  DataComm& dp_;
  Buffer* wire_;
  std::vector<size_t> wire_offset_;  // each chunk's start in the wire buffer
  std::vector<Bucket> buckets_;      // in the order they become ready; the held-back last
  std::chrono::steady_clock::time_point first_start_;
  bool any_started_ = false;
  double exposed_ms_ = 0, last_done_ms_ = 0;
};

}  // namespace trainer
