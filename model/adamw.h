#pragma once
// AdamW over the contiguous parameter buffer, with PyTorch's update formula.
// Weight decay applies only to tensors the registry marks (matrices and
// embeddings), never to norms and biases.
#include "model/param_registry.h"
#include "runtime/backend.h"

namespace trainer {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW {
 public:
  AdamW(Backend& be, const ParamRegistry& reg, const AdamWConfig& cfg);
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;
  // One update of the fp32 master weights with learning rate lr on gradients
  // grads * grad_scale (the clipping coefficient); the step count advances
  // by one.
  // compute_copy (bf16 runs): refreshed from the new weights in the same pass.
  void step(Buffer& params, const Buffer& grads, float lr, float grad_scale = 1.f, Buffer* compute_copy = nullptr);
  long steps_taken() const { return t_; }
  void set_steps_taken(long t) { t_ = t; }  // when resuming
  Buffer& m() { return m_; }
  Buffer& v() { return v_; }

 private:
  Backend& be_;
  const ParamRegistry& reg_;
  AdamWConfig cfg_;
  Buffer m_, v_;  // fp32, laid out as the registry
  long t_ = 0;
};

// The factor that scales gradients of norm `norm` to at most max_norm
// (max_norm <= 0: 1, no clipping); as torch.nn.utils.clip_grad_norm_,
// min(1, max_norm / (norm + 1e-6)).
float clip_coefficient(double norm, double max_norm);

}  // namespace trainer
