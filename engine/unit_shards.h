#pragma once
// ZeRO-2 (parallel.zero_stage = 2): each weight replica keeps only its slices
// of the gradients (model/adamw.h unit_ranges: every unit cut into one slice
// per replica), and no whole gradient buffer.
//
// The backward borrows one window per unit (Transformer::GradWindows). A
// unit's window (a layer's, an untied head's or embedding's) is
// reduce-scattered into the owners' slices as soon as the backward gives it
// back, every micro-batch, while the backward goes on (two windows take
// turns: one being written, one in flight), and each owner adds what
// arrives into its shard, which thus sums the step's micro-batches. A tied
// embedding's units keep their windows for the whole step (its gradient
// gets the head's part first and the embedding's last, and its two copies
// on the first and last pipeline stage are summed over the embedding group
// first): they are reduce-scattered in finish(). Under sequence parallelism a window's
// partial gradients are summed over TP before it leaves. A bf16 run sends
// bf16 through a wire buffer and adds in fp32, as GradBuckets does.
//
// After the update each rank's slices of the weights (the compute copy in
// a bf16 run) are all-gathered, unit by unit, back into whole weights.
#include <chrono>
#include <vector>

#include "engine/grad_reduce.h"
#include "model/adamw.h"

namespace trainer {

class UnitShards {
 public:
  // dp: the weight replicas; embed: first + last stage, for a tied
  // embedding (null or of one rank: none). Each chunk's slices are
  // unit_ranges of its units over dp, as its AdamW keeps them.
  UnitShards(Backend& be, Chunks& chunks, DataComm& dp, DataComm* embed, bool tied_embeddings);
  // Lends the windows to every chunk (the chunks must outlive this).
  void lend();
  // Before a step's schedule: the shards and the held windows start at zero.
  void begin_step();
  // After the schedule: the rest reduced and landed.
  void finish();
  // Chunk c's reduced gradient slices (AdamW's owned ranges, at their `local`).
  Buffer& shard(size_t c) { return per_[c].shard; }
  const std::vector<OwnedRange>& owned(size_t c) const { return per_[c].owned; }
  // The gradient norm's spans over the shards (Transformer::grad_spans'
  // groups; a tied copy left out): each element is on one rank only.
  std::vector<Backend::SumSpan> grad_spans();
  // After each rank updated its slices: whole weights everywhere again.
  void allgather_weights();
  // The step's exposed data-parallel communication: the backward's waits
  // for a window still in flight, and finish().
  double exposed_ms() const { return exposed_ms_; }
  double span_ms() const { return last_done_ms_; }

 private:
  struct Chunk : UnitSlices {
    using UnitSlices::UnitSlices;
    Buffer shard;               // fp32, owned ranges back to back
    std::vector<Buffer> whole;  // per unit: its window for the whole step (the held units), else empty
  };
  struct Window {  // a unit's gradients, then on their way to the owners
    Buffer grads;     // fp32, the largest unit taking turns, padded to dp slices
    Buffer wire;      // bf16 runs: grads narrowed for the wire
    Buffer landing;   // one slice of the compute type: this rank's sum
    int chunk = -1, unit = -1;  // lent or in flight; -1: free
    bool in_flight = false;
    DataComm::Handle handle{};
  };
  float* open(size_t c, int u);
  void close(size_t c, int u);
  // Reduce-scatters unit u's padded window (fp32; wire: its narrowed copy
  // in a bf16 run) into landing; not waited.
  DataComm::Handle start(size_t c, int u, float* window, Buffer& wire, Buffer& landing);
  void land(size_t c, int u, Buffer& landing);  // adds this rank's slice into the shard
  void wait(Window& w);
  void poll();
  size_t slice(size_t c, int u) const { return unit_slice(per_[c].units.all[u].size(), dp_.size()); }

  Backend& be_;
  Chunks& chunks_;
  DataComm& dp_;
  DataComm* embed_;
  bool tied_;
  DType wire_type_;
  std::vector<Chunk> per_;
  Window windows_[2];
  int next_ = 0;           // the window the next unit taking turns gets
  Buffer held_wire_;       // bf16 runs: a held window narrowed for the wire
  Buffer widened_;         // bf16 runs, fp32: a landing before it is added
  std::chrono::steady_clock::time_point first_start_;
  bool any_started_ = false;
  double exposed_ms_ = 0, last_done_ms_ = 0;
};

}  // namespace trainer
