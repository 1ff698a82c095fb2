#include "model/layer/layer_shape.h"

#include <algorithm>

#include "model/layer/moe_routing.h"

namespace trainer {

LayerShape layer_shape(const ModelConfig& c, const RankLayout& l) {
  LayerShape s;
  const size_t t = l.tp;
  s.B = l.micro_batch, s.T = l.sequence_share(c.seq_len), s.keys = c.seq_len, s.M = s.B * s.T;
  s.R = l.sequence_parallel && l.tp > 1 ? s.M / t : s.M;
  s.d = c.d_model, s.hd = c.head_dim();
  s.H = c.n_heads / t, s.KV = c.kv_heads() / t, s.F = c.d_ff / t;
  s.Q = (s.H + 2 * s.KV) * s.hd;
  s.att = s.H * s.hd;
  if (c.moe.enabled()) {
    s.E = c.moe.experts, s.k = c.moe.top_k, s.Fe = c.moe.expert_ffn, s.pairs = s.R * s.k;
    s.Fs = c.moe.shared_expert_ffn / t;
    s.El = s.E / l.ep;
    if (l.ep > 1) {
      s.X = (size_t)l.ep * s.R * std::min(s.k, s.El);
      const int capacity = expert_capacity(c.moe.capacity_factor, (int)s.k, (int)s.R, (int)s.E);
      if (capacity > 0) s.X = std::min(s.X, (size_t)l.ep * s.El * capacity);
    }
  }
  return s;
}

}  // namespace trainer
