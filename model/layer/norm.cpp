#include "model/layer/norm.h"

namespace trainer {

namespace {
class LayerNorm final : public Norm {
 public:
  NormParams add_params(ParamRegistry& r, const std::string& p, const ModelConfig& c) const override {
    NormParams n;
    n.w = r.add(p + "weight", {c.d_model}, false, Sharding::Replicated, true).offset;
    n.b = r.add(p + "bias", {c.d_model}, false, Sharding::Replicated, true).offset;
    return n;
  }
  std::vector<std::string> tensor_names() const override { return {"weight", "bias"}; }
  void forward(const LayerOps& o, const NormParams& p, Ref out, float* mean, float* rstd, CRef x,
               float eps) const override {
    o.be->layernorm_fwd(out, mean, rstd, x, o.W(p.w), o.W(p.b), (int)o.shape.R, (int)o.shape.d, eps);
  }
  void backward(const LayerOps& o, const NormParams& p, Ref dx, CRef dout, CRef x, const float* mean,
                const float* rstd) const override {
    o.be->layernorm_bwd(dx, o.G(p.w), o.G(p.b), dout, x, o.W(p.w), mean, rstd, (int)o.shape.R, (int)o.shape.d);
  }
};

class RmsNorm final : public Norm {
 public:
  NormParams add_params(ParamRegistry& r, const std::string& p, const ModelConfig& c) const override {
    NormParams n;
    n.w = r.add(p + "weight", {c.d_model}, false, Sharding::Replicated, true).offset;
    return n;
  }
  std::vector<std::string> tensor_names() const override { return {"weight"}; }
  void forward(const LayerOps& o, const NormParams& p, Ref out, float*, float* rstd, CRef x,
               float eps) const override {
    o.be->rmsnorm_fwd(out, rstd, x, o.W(p.w), (int)o.shape.R, (int)o.shape.d, eps);
  }
  void backward(const LayerOps& o, const NormParams& p, Ref dx, CRef dout, CRef x, const float*,
                const float* rstd) const override {
    o.be->rmsnorm_bwd(dx, o.G(p.w), dout, x, o.W(p.w), rstd, (int)o.shape.R, (int)o.shape.d);
  }
};
}  // namespace

const Norm& layer_norm() {
  static const LayerNorm n;
  return n;
}
const Norm& rms_norm() {
  static const RmsNorm n;
  return n;
}
const Norm& norm_for(const ModelConfig& c) { return c.arch == Arch::Llama ? rms_norm() : layer_norm(); }

}  // namespace trainer
