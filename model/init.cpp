#include "model/init.h"

#include <cmath>
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
    if (p.shape.size() == 1) {
      const bool is_norm_weight = ends_with(p.name, "norm.weight");
      for (size_t i = 0; i < p.numel; i++) x[i] = is_norm_weight ? 1.f : 0.f;
      continue;
    }
    const bool out_proj = ends_with(p.name, "attn.wo") || ends_with(p.name, "mlp.w_proj") ||
                          ends_with(p.name, "mlp.w_down");
    Rng rng(seed, p.name);
    rng.fill_normal(x, p.numel, out_proj ? std_out : std_base);
  }
}

}  // namespace trainer
