#pragma once
// A chunk's parameters cut into the units full sharding works in
// (parallel.zero_stage >= 2): the embedding's tensors, each layer's, and the
// final norm's with the head's. Each is one contiguous stretch of the
// registry's layout (embedding, layers, final norm, head), so a unit's
// gradient is final, and can leave for its owners, as soon as the backward
// has passed it.
#include <cstddef>
#include <vector>

#include "model/param_registry.h"

namespace trainer {

struct ParamUnit {
  size_t lo = 0, hi = 0;  // registry offsets [lo, hi)
  size_t size() const { return hi - lo; }
};

struct ParamUnits {
  std::vector<ParamUnit> all;  // in registry order
  int embed = -1, head = -1;   // their indexes; -1 where the chunk holds none
  int first_layer = 0;         // the index of the chunk's first layer
  int layer(int l) const { return first_layer + l; }  // l counts from the chunk's first layer
  int of(size_t offset) const;                         // the unit holding a registry offset
  // The embedding and the head: used at both ends of a pass, so full sharding
  // keeps their gradients (and ZeRO-3 their gathered weights) for the step.
  bool held(int u) const { return u == embed || u == head; }
  size_t largest_layer() const;                        // elements of the largest layer unit
};

ParamUnits param_units(const ModelParams& mp);

}  // namespace trainer
