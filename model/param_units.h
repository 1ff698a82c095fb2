#pragma once
// A chunk's parameters cut into the units full sharding works in
// (parallel.zero_stage >= 2): the embedding's tensors, each layer's, and the
// final norm's with the head's. Each is one contiguous stretch of the
// registry's layout (embedding, layers, final norm, head), so a unit's
// gradient is final, and can leave for its owners, as soon as the backward
// has passed it (a tied embedding's: after the step's schedule). Under
// ZeRO-3 with parallel.zero_persist_below, a layer whose vectors (norm
// weights, biases: the front of its stretch) each hold fewer elements than
// that is two units: the vectors, which persist (gathered once a step and
// kept, as a tied embedding is), and the matrices.
#include <cstddef>
#include <vector>

#include "model/param_registry.h"

namespace trainer {

struct ParamUnit {
  size_t lo = 0, hi = 0;  // registry offsets [lo, hi)
  bool persists = false;  // a layer's vectors, kept for the step
  size_t size() const { return hi - lo; }
};

struct ParamUnits {
  std::vector<ParamUnit> all;  // in registry order
  int embed = -1, head = -1;   // their indexes; -1 where the chunk holds none
  bool tied = false;           // the head reads the embedding (ModelParams::tied)
  int first_layer = 0;         // the index of the chunk's first layer's first unit
  std::vector<int> layers;     // per layer of the chunk: the unit of its matrices (and vectors, unless they persist)
  int layer(int l) const { return layers[l]; }  // l counts from the chunk's first layer
  // Layer l's persisting vectors' unit, just before its matrices' (-1: none).
  int persisting(int l) const { return layers[l] > 0 && all[layers[l] - 1].persists ? layers[l] - 1 : -1; }
  int of(size_t offset) const;                  // the unit holding a registry offset
  // A tied embedding's units (used at both ends of a pass, its copies on
  // the first and last pipeline stage summed after the schedule) and a
  // layer's persisting vectors: full sharding keeps their gradients (and
  // ZeRO-3 their gathered weights) for the step. An untied embedding and
  // head take turns with the layers, as layers do.
  bool held(int u) const { return (tied && (u == embed || u == head)) || all[u].persists; }
};

// persist_below: RankLayout::persist_below() (0: no unit persists).
ParamUnits param_units(const ModelParams& mp, size_t persist_below = 0);

}  // namespace trainer
