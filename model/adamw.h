#pragma once
// AdamW over the contiguous parameter buffer, with PyTorch's update formula.
// Weight decay applies only to tensors the registry marks (matrices and
// embeddings), never to norms and biases.
#include <vector>

#include "model/param_registry.h"
#include "model/param_units.h"
#include "runtime/backend.h"

namespace trainer {

// A range [lo, hi) of the flat parameter buffer whose optimizer state this
// rank keeps, at `local` in its m and v (and, under ZeRO-2, in its gradient
// shard). shared: every rank keeps and updates it alike (ZeRO-1's tail).
struct OwnedRange {
  size_t lo, hi, local;
  bool shared = false;  // every rank of the group keeps it alike
  bool saver = true;    // of a shared range: the one rank of the group that saves it (and counts it in sums)
};

// ZeRO-1's split of n parameters over dp ranks: rank r owns the block
// [r * n/dp, (r+1) * n/dp) and every rank the tail past dp * (n/dp) (fewer
// than dp elements, updated alike everywhere; the last rank saves it), so
// the blocks reduce-scatter and all-gather as equal pieces with no padding.
// dp = 1: all of it. `at`: where the n parameters start (local offsets from
// `local`).
std::vector<OwnedRange> zero_ranges(size_t n, int dp_rank, int dp_size, size_t at = 0, size_t local = 0);
// ZeRO-2's split: each unit (model/param_units.h) on its own, in slices of
// unit_slice(n, dp) elements, rank r the r-th (the last ones shorter or
// empty: a unit is padded to dp slices for its collectives, the padding
// belongs to no one). A unit's gradient thus reduce-scatters alone, as soon
// as its backward is done.
size_t unit_slice(size_t unit_elems, int dp_size);
std::vector<OwnedRange> unit_ranges(const ParamUnits& units, int dp_rank, int dp_size);
// A rank's slices of a chunk's units, as ZeRO-2's gradient shards
// (engine/unit_shards.h) and ZeRO-3's master weights (engine/unit_weights.h)
// hold them.
struct UnitSlices {
  UnitSlices(ParamUnits units, int dp_rank, int dp_size);
  ParamUnits units;
  std::vector<OwnedRange> owned;  // unit_ranges
  std::vector<int> owned_of;      // per unit: its index in `owned`, -1: the rank's slice is all padding
};
size_t owned_count(const std::vector<OwnedRange>& ranges);

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW {
 public:
  // owned: the ranges whose state this rank keeps and updates (empty: all).
  AdamW(Backend& be, const ParamRegistry& reg, const AdamWConfig& cfg, std::vector<OwnedRange> owned = {});
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;
  // One update of the fp32 master weights (the owned ranges) with learning
  // rate lr on gradients grads * grad_scale (the clipping coefficient); the
  // step count advances by one.
  // compute_copy (bf16 runs): refreshed from the new weights in the same pass.
  // packed: which of grads and params hold only the owned ranges, at their
  // `local` places (ZeRO-2: the gradient shard; ZeRO-3: the weights' too),
  // not the whole flat layout.
  enum class Packed { None, Grads, Both };
  void step(Buffer& params, const Buffer& grads, float lr, float grad_scale = 1.f, Buffer* compute_copy = nullptr,
            Packed packed = Packed::None);
  long steps_taken() const { return t_; }
  void set_steps_taken(long t) { t_ = t; }  // when resuming
  // m and v hold the owned ranges, one after another.
  Buffer& m() { return m_; }
  Buffer& v() { return v_; }
  const std::vector<OwnedRange>& owned() const { return owned_; }

 private:
  Backend& be_;
  const ParamRegistry& reg_;
  AdamWConfig cfg_;
  std::vector<OwnedRange> owned_;
  Buffer m_, v_;  // fp32, the owned ranges of the registry's layout
  long t_ = 0;
};

// The factor that scales gradients of norm `norm` to at most max_norm
// (max_norm <= 0: 1, no clipping); as torch.nn.utils.clip_grad_norm_,
// min(1, max_norm / (norm + 1e-6)).
float clip_coefficient(double norm, double max_norm);

}  // namespace trainer
