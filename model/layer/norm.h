#pragma once
// A norm over this rank's rows of the residual stream (a layer's two and the
// final one): LayerNorm with a bias (GPT-2) or RMSNorm (Llama). Each kind
// declares its tensors and runs its forward and backward; norm_for picks
// the model's. Its per-row statistics (a mean and a reciprocal standard
// deviation, fp32) are the layer's saved activations (layer_decl.h; RMSNorm
// leaves the mean's rows unused).
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer/layer_ops.h"
#include "model/param_registry.h"

namespace trainer {

class Norm {
 public:
  virtual ~Norm() = default;
  // Its tensors under `prefix` ("layers.3.attn_norm."): replicated over tp,
  // their gradients partial under sequence parallelism.
  virtual NormParams add_params(ParamRegistry& r, const std::string& prefix, const ModelConfig& c) const = 0;
  // Their names after the prefix, in that order ("weight", "bias").
  virtual std::vector<std::string> tensor_names() const = 0;
  // out = norm(x) over this rank's rows; mean and rstd: what backward reads.
  virtual void forward(const LayerOps& o, const NormParams& p, Ref out, float* mean, float* rstd, CRef x,
                       float eps) const = 0;
  // dx += the gradient through the norm; the tensors' gradients accumulate.
  virtual void backward(const LayerOps& o, const NormParams& p, Ref dx, CRef dout, CRef x, const float* mean,
                        const float* rstd) const = 0;
};

const Norm& layer_norm();
const Norm& rms_norm();
const Norm& norm_for(const ModelConfig& c);

}  // namespace trainer
