#include "model/adamw.h"

#include <cmath>

namespace trainer {

AdamW::AdamW(Backend& be, const ParamRegistry& reg, const AdamWConfig& cfg)
    : be_(be), reg_(reg), cfg_(cfg), m_(be.alloc(reg.total(), DType::F32, Mem::Optimizer)),
      v_(be.alloc(reg.total(), DType::F32, Mem::Optimizer)) {}

void AdamW::step(Buffer& params_buf, const Buffer& grads_buf, float lr, float grad_scale, Buffer* compute_copy) {
  float* params = params_buf.ref().f32();
  const float* grads = grads_buf.ref().f32();
  float* m = m_.ref().f32();
  float* v = v_.ref().f32();
  t_++;
  const float bc1 = 1.f - std::pow(cfg_.beta1, (float)t_);
  const float bc2 = 1.f - std::pow(cfg_.beta2, (float)t_);
  for (const ParamInfo& p : reg_.all()) {
    const size_t o = p.offset;
    be_.adamw(params + o, grads + o, m + o, v + o, p.numel, lr, cfg_.beta1, cfg_.beta2,
              cfg_.eps, p.decay ? cfg_.weight_decay : 0.f, bc1, bc2, grad_scale,
              compute_copy ? compute_copy->ref(o) : Ref());
  }
}

float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.f;
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? (float)coef : 1.f;
}

}  // namespace trainer
