#pragma once
// ZeRO-3 (parallel.zero_stage = 3): each weight replica keeps only its
// slices of the fp32 master weights (model/adamw.h unit_ranges, the slices
// its AdamW updates and its gradient shard holds, engine/unit_shards.h),
// and no whole weights.
//
// A unit's whole weights exist only while the model computes with it: the
// Transformer borrows them per pass (Transformer::WeightWindows), and each
// opening all-gathers every rank's slice, converted to the compute type into
// its place in a window, in place (no input buffer). Units (layers, an
// untied embedding and head) take turns in 1 + prefetch windows
// (parallel.zero_prefetch), and closing one drops it (reshard after
// forward). A tied embedding's units, a layer's persisting vectors, and
// with parallel.reshard_after_forward = false every unit, have windows of
// their own, gathered once after the weights changed and kept until they
// change again (invalidate()). Opening a unit starts the gathers of the
// pass's next `prefetch` units (u + 1, ... forward; u - 1, ... backward),
// into free turn-taking windows or their own, so they travel while u
// computes. Per layer and micro-batch that is two all-gathers (forward,
// backward), or, kept, one per step; an untied embedding's and head's one
// (the embedding's backward reads no weights; the head's backward follows
// its forward, and its window keeps it until a unit needs that window, as
// torchtitan keeps the final norm and output gathered).
#include <vector>

#include "engine/grad_reduce.h"
#include "model/adamw.h"

namespace trainer {

class UnitWeights {
 public:
  // dp: the weight replicas. The master weights start at zero: the caller
  // writes this rank's slices of the initial ones (master, owned).
  UnitWeights(Backend& be, Chunks& chunks, DataComm& dp, bool reshard_after_forward, int prefetch);
  // Lends the windows to every chunk (the chunks must outlive this).
  void lend();
  // Chunk c's fp32 master weights: its AdamW's owned ranges, at their `local`.
  Buffer& master(size_t c) { return per_[c].master; }
  const std::vector<OwnedRange>& owned(size_t c) const { return per_[c].owned; }
  // The master weights changed (an update, a load): every gathered window is stale.
  void invalidate();
  // Time the model waited for gathers (what the prefetch did not hide)
  // since the last reset.
  double exposed_ms() const { return exposed_ms_; }
  void reset_exposed() { exposed_ms_ = 0; }

 private:
  struct Window {
    Buffer weights;            // compute type, padded to dp slices (gathered in place)
    int chunk = -1, unit = -1;  // what it holds or is gathering; -1: nothing
    bool in_flight = false, in_use = false;
    bool cached = false;  // closed but still holding its unit (the head between its forward and backward)
    DataComm::Handle handle{};
  };
  struct Chunk : UnitSlices {
    using UnitSlices::UnitSlices;
    Buffer master;
    std::vector<Window> kept;   // per unit: its own window (held units), else empty
  };
  CRef open(size_t c, int u, int pass);
  void close(size_t c, int u, int pass);
  bool kept(size_t c, int u) const { return (bool)per_[c].kept[u].weights; }
  void start(size_t c, int u, Window& w);  // the gather into w, not waited
  void prefetch(size_t c, int u, int pass);  // starts the gathers of the units after u
  void poll();  // moves the gathers in flight on
  void finish(Window& w);                  // waits for w's gather
  Window* holding(size_t c, int u);        // the turn-taking window with unit u, if any
  Window* free_window();

  Backend& be_;
  Chunks& chunks_;
  DataComm& dp_;
  DType type_;
  std::vector<Chunk> per_;
  int prefetch_;
  std::vector<Window> turns_;  // 1 + prefetch, when units take turns
  double exposed_ms_ = 0;
};

}  // namespace trainer
