#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include <string>

#include "runtime/rng.h"

namespace trainer {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void init_params(const ModelParams& mp, const ModelConfig& cfg, uint64_t seed, float* host) {
  const float std_base = 0.02f;
  const float std_out = std_base / std::sqrt(2.0f * cfg.n_layers);
  for (const ParamInfo& p : mp.reg.all()) {
    float* x = host + p.offset;
    if (p.shape.size() == 1) {  // norms and biases: constants, any slice is the same
      const bool is_norm_weight = ends_with(p.name, "norm.weight");
      for (size_t i = 0; i < p.numel; i++) x[i] = is_norm_weight ? 1.f : 0.f;
      continue;
    }
    const bool out_proj = ends_with(p.name, "attn.wo") || ends_with(p.name, "mlp.w_proj") ||
                          ends_with(p.name, "w_down");  // (an expert's too)
    // Draw the whole global tensor, keep this rank's slice: every layout
    // starts from the same weights.
    const size_t rows = p.global_shape[0], cols = p.global_shape[1];
    std::vector<float> full(p.sharding == Sharding::Replicated ? 0 : rows * cols);
    float* dst = full.empty() ? x : full.data();
    Rng rng(seed, p.name);
    rng.fill_normal(dst, rows * cols, out_proj ? std_out : std_base);
    const int r = mp.reg.tp_rank();
    if (p.sharding == Sharding::Dim0) {
      std::copy_n(full.data() + r * p.numel, p.numel, x);
    } else if (p.sharding == Sharding::Dim1) {
      const size_t lc = p.shape[1];
      for (size_t i = 0; i < rows; i++) std::copy_n(full.data() + i * cols + r * lc, lc, x + i * lc);
    }
  }
}

}  // namespace trainer
