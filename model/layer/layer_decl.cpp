#include "model/layer/layer_decl.h"

#include "runtime/backend.h"

namespace trainer {

SavedActs layer_saved(const LayerShape& s) {
  const Kept product = Kept::UnlessFull;
  const size_t stats = s.B * s.H * s.T * Backend::kAttentionStats;  // per query row and head
  return {
      {s.R * s.d, false, Kept::Always},  // kResidIn
      {s.M * s.d, false, product},       // kNorm1
      {s.R, true, product},              // kMean1
      {s.R, true, product},              // kRstd1
      {s.M * s.Q, false, product},       // kQkv
      {stats, true, product},            // kAttStats
      {s.M * s.att, false, product},     // kAtt
      {s.R * s.d, false, product},       // kResidMid
      {s.M * s.d, false, product},       // kNorm2
      {s.R, true, product},              // kMean2
      {s.R, true, product},              // kRstd2
  };
}

std::vector<size_t> layer_scratch(const LayerShape& s) { return {s.R * s.d, s.M * s.d, s.M * s.att, s.M * s.Q}; }

double layer_rerun_flops(const LayerShape& s) {
  const double qkv = 2.0 * s.M * s.d * s.Q, out_proj = 2.0 * s.M * s.att * s.d;
  const double attn_core = 2.0 * 2 * s.B * s.H * s.T * s.keys * s.hd;  // QK^T and PV
  return qkv + attn_core + out_proj;
}

double layer_matmul_params(const ModelConfig& c) {
  const double d = c.d_model;
  return d * c.qkv_dim() + d * d;
}

}  // namespace trainer
