#include "model/memory_plan.h"

#include <algorithm>

#include "runtime/backend.h"

namespace trainer {

double MemoryPlan::total() const {
  double t = 0;
  for (double b : bytes) t += b;
  return t;
}

namespace {
struct Dims {
  double B, T, M, R, d, hd, H, KV, F, V, Q, din, att;
};
Dims dims(const ModelConfig& c, const RankLayout& l) {
  Dims x;
  const double t = l.tp;
  x.B = l.micro_batch, x.T = c.seq_len, x.M = x.B * x.T;
  x.R = l.sequence_parallel && l.tp > 1 ? x.M / t : x.M;
  x.d = c.d_model, x.hd = c.head_dim();
  x.H = c.n_heads / t, x.KV = c.kv_heads() / t, x.F = c.d_ff / t, x.V = c.vocab_size / t;
  x.Q = (x.H + 2 * x.KV) * x.hd;
  x.din = c.arch == Arch::Llama ? 2 * x.F : x.F;
  x.att = x.H * x.hd;
  return x;
}
}  // namespace

MemoryPlan plan_memory(const ModelConfig& c, const RankLayout& l, const RecomputeConfig& rc) {
  MemoryPlan p;
  const Dims x = dims(c, l);
  const double f = 4;  // bytes per float
  // What one layer keeps for backward, split into its input, the matrix-
  // product outputs and norms, and the softmax + MLP activation.
  const double input = x.R * x.d;
  // Attention keeps per-row statistics (kAttentionStats floats per query
  // row and head), never the T x T probabilities.
  const double stats = x.B * x.H * x.T * Backend::kAttentionStats;
  const double products = x.M * x.d + 2 * x.R + x.M * x.Q + stats + x.M * x.att + x.R * x.d + x.M * x.d +
                          2 * x.R + x.M * x.din;
  const double dropped_by_selective = x.M * x.F;
  for (const ChunkLayout& ch : l.chunks) {
    const ModelParams mp = build_params(c, l.tp, 0, ch.spec);
    const double n = (double)mp.reg.total();
    p.bytes[(int)Mem::Params] += n * f;
    p.bytes[(int)Mem::Grads] += n * f;
    p.bytes[(int)Mem::Optimizer] += 2 * n * f;
    const int layers = ch.spec.last_layer - ch.spec.first_layer;
    double per_slot = 0, workspace = 0;
    for (int i = 0; i < layers; i++) {
      const RecomputeMode m = rc.applies(i) ? rc.mode : RecomputeMode::None;
      per_slot += input;
      if (m == RecomputeMode::None) per_slot += products + dropped_by_selective;
      if (m == RecomputeMode::Selective) per_slot += products;
      if (m == RecomputeMode::Full) workspace = products + dropped_by_selective;
      if (m == RecomputeMode::Selective) workspace = dropped_by_selective;
    }
    per_slot += x.R * x.d;  // the chunk's output
    if (ch.spec.head) per_slot += x.M * x.d + 2 * x.R + x.M * x.V + 4 * x.M;
    const double tokens = 2 * x.M;  // inputs and targets (int32)
    p.bytes[(int)Mem::Activations] += (ch.slots * (per_slot + tokens) + workspace) * f;
    // Backward scratch; tensor-parallel collective buffers.
    p.bytes[(int)Mem::Temporaries] += (x.R * x.d + x.M * x.d + x.M * x.att + x.M * x.Q +
                                       x.M * x.din + x.M * x.F) * f;
    if (l.tp > 1) p.bytes[(int)Mem::Comm] += x.M * x.d * f;
    if (l.tp > 1 && l.sequence_parallel) p.bytes[(int)Mem::Comm] += (2 * x.R * x.d + x.M * x.d) * f;
    // Pipeline messages: received activations and gradients, sent gradients.
    if (l.pipelined) {
      const double kinds = (ch.spec.embed ? 0 : 2) + (ch.spec.head ? 0 : 1);
      p.bytes[(int)Mem::Comm] += kinds * l.micro_batches * x.R * x.d * f;
    }
  }
  // Attention backward's per-thread buffers: probabilities and their
  // gradient for a block of query rows against up to T keys (RoPE's tables
  // fit within them).
  const double block = std::min<double>(x.T, Backend::kAttentionBlock);
  p.bytes[(int)Mem::Temporaries] += l.threads * 2 * block * x.T * f;
  return p;
}

double recompute_extra_flops(const ModelConfig& c, const RankLayout& l, const RecomputeConfig& rc) {
  const Dims x = dims(c, l);
  // Forward product FLOPs of one layer for one micro-batch on this rank.
  const double attn_core = 2 * 2 * x.B * x.H * x.T * x.T * x.hd;  // QK^T and PV
  const double qkv = 2 * x.M * x.d * x.Q, out_proj = 2 * x.M * x.att * x.d;
  const double mlp_in = 2 * x.M * x.d * x.din;
  double extra = 0;
  for (const ChunkLayout& ch : l.chunks) {
    const int layers = ch.spec.last_layer - ch.spec.first_layer;
    for (int i = 0; i < layers; i++) {
      if (!rc.applies(i)) continue;
      // Full reruns all but the MLP's output product; selective only an
      // elementwise activation (no products).
      if (rc.mode == RecomputeMode::Full) extra += qkv + attn_core + out_proj + mlp_in;
    }
  }
  return extra * l.micro_batches;
}

}  // namespace trainer
