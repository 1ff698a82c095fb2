#pragma once
// The sizes of one transformer layer's tensors on one rank, for one
// micro-batch: what its parts (model/layer/layer_decl.h, attention.h, mlp.h)
// declare their saved activations, backward scratch and FLOPs from, so that
// the model's allocation (model/transformer.cpp) and the memory plan
// (model/memory_plan.cpp) read one declaration.
#include <cstddef>

#include "model/config.h"
#include "model/rank_layout.h"

namespace trainer {

struct LayerShape {
  size_t B;     // sequences per micro-batch
  size_t T;     // tokens of each here: GridShape::sequence_share
  size_t keys;  // the tokens attention sees: the whole sequence
  size_t M;     // token rows: B * T
  size_t R;     // the rows this rank keeps of the residual stream: M / tp under sequence parallelism, else M
  size_t d;     // d_model
  size_t hd;    // head width
  size_t H, KV;  // this rank's heads and key-value heads (/ tp)
  size_t F;      // this rank's MLP hidden units (d_ff / tp)
  size_t Q;      // the packed q|k|v width of this rank: (H + 2 KV) * hd
  size_t att;    // attention's output width: H * hd
  // Mixture-of-Experts MLPs (model/layer/moe_mlp.cpp; 0 when dense):
  // experts, the experts a token goes to, an expert's hidden width, the
  // most (token, expert) pairs one micro-batch routes (R * k), and this
  // rank's hidden units of the shared expert (/ tp). Under expert
  // parallelism (ep > 1): this rank's experts (E / ep; else E) and the most
  // rows they receive from the ep ranks (ep x R x min(k, El), or fewer
  // with a capacity; 0 without expert parallelism).
  size_t E = 0, k = 0, Fe = 0, pairs = 0, Fs = 0, El = 0, X = 0;
};

LayerShape layer_shape(const ModelConfig& c, const RankLayout& l);

}  // namespace trainer
