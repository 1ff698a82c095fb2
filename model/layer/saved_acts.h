#pragma once
// What a block of a layer keeps from its forward for its backward, declared
// once: the model carves its activation buffers from the declarations and
// the memory plan sums them, per recompute mode (model/recompute.h).
#include <cstddef>
#include <vector>

#include "model/recompute.h"

namespace trainer {

// Which recompute modes keep a saved activation in the layer's own memory;
// the others rebuild it, before the layer's backward, into a workspace all
// recomputing layers share.
enum class Kept {
  Always,            // the layer's input: full recomputation reruns the layer from it
  UnlessFull,        // products, norms and their statistics
  WithoutRecompute,  // what selective recomputation drops: cheap to rebuild (the MLP's activation)
};

inline bool kept_in(Kept k, RecomputeMode m) {
  return k == Kept::Always || m == RecomputeMode::None || (m == RecomputeMode::Selective && k == Kept::UnlessFull);
}

struct SavedAct {
  size_t elems;  // per micro-batch
  bool fp32;     // fp32 (statistics), else the compute type
  Kept kept;
};
using SavedActs = std::vector<SavedAct>;

}  // namespace trainer
