#pragma once
// Activation recomputation: which saved activations a layer drops after its
// forward pass and rebuilds during backward.
//   None:      keep everything the backward needs.
//   Selective: keep the matrix-product outputs; drop the MLP activation
//              output and recompute it from the kept pre-activation. (Megatron's
//              selective recomputation also drops the attention softmax,
//              B x heads x T x T; the flash-style attention contract never
//              keeps it, so the MLP activation is what is left worth dropping.)
//   Full:      keep only the layer's input; rerun the whole layer forward
//              (but its last product) before its backward.
// `layers` is how many of each chunk's layers recompute, from its first
// (Megatron's "block" method); -1 means all.
#include <compare>

namespace trainer {

enum class RecomputeMode { None, Selective, Full };

struct RecomputeConfig {
  RecomputeMode mode = RecomputeMode::None;
  int layers = -1;
  bool applies(int local_layer) const {
    return mode != RecomputeMode::None && (layers < 0 || local_layer < layers);
  }
  auto operator<=>(const RecomputeConfig&) const = default;
};

inline const char* recompute_name(RecomputeMode m) {
  return m == RecomputeMode::None ? "none" : m == RecomputeMode::Selective ? "selective" : "full";
}

}  // namespace trainer
