#pragma once
// Decoder-only transformer ("gpt2" or "llama") with explicit forward and
// backward passes, llm.c style: parameters, gradients and activations live in
// contiguous buffers owned here, and every op is a Backend call.
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/param_registry.h"
#include "runtime/backend.h"

namespace trainer {

class Transformer {
 public:
  // micro_batch: sequences per forward/backward; activations are sized for it.
  Transformer(Backend& be, const ModelConfig& cfg, int micro_batch);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ModelParams& layout() const { return mp_; }
  const ParamRegistry& registry() const { return mp_.reg; }
  size_t num_params() const { return mp_.reg.total(); }
  float* params() { return params_; }
  float* grads() { return grads_; }
  int micro_batch() const { return B_; }
  size_t activation_floats() const { return act_floats_; }

  // Runs the forward pass on [B, T] inputs/targets (host int32 arrays) and
  // returns the mean loss. With grad_scale != 0 the loss gradient (scaled by
  // grad_scale per token) is prepared for backward().
  double forward(const int32_t* inputs, const int32_t* targets, float grad_scale);
  // Accumulates parameter gradients into grads() for the last forward().
  void backward();

 private:
  struct LayerActs {
    float *resid_in, *norm1, *mean1, *rstd1, *qkv, *probs, *att, *resid_mid;
    float *norm2, *mean2, *rstd2, *h_in, *h_act;
  };
  void norm_fwd(float* out, float* mean, float* rstd, const float* x, size_t w, size_t b);
  void norm_bwd(float* dx, const float* dout, const float* x, size_t w, size_t b,
                const float* mean, const float* rstd);
  AttentionShape attn_shape() const;

  Backend& be_;
  ModelConfig cfg_;
  ModelParams mp_;
  int B_, M_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* acts_ = nullptr;
  size_t act_floats_ = 0;
  std::vector<LayerActs> la_;
  float *resid_final_, *normf_, *meanf_, *rstdf_, *logits_, *losses_;
  // backward scratch
  float *g_resid_, *g_norm_, *g_att_, *g_qkv_, *g_hin_, *g_act_;
  int32_t *inputs_ = nullptr, *targets_ = nullptr;
  std::vector<float> host_losses_;
};

}  // namespace trainer
