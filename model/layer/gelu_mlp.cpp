// GPT-2's MLP: h = gelu(x W_fc^T + b_fc), out = h W_proj^T + b_proj; W_fc
// column-parallel (hidden units over tp), W_proj row-parallel.
#include "model/layer/mlp.h"

namespace trainer {

namespace {
enum Param { kWFc, kBFc, kWProj, kBProj };
enum Saved { kHIn, kHAct };      // the first product's output, the activation's
enum Scratch { kGHIn, kGHAct };  // their gradients (Mlp::scratch)

class GeluMlp final : public Mlp {
 public:
  const std::vector<MlpParam>& params() const override {
    static const std::vector<MlpParam> p = {  // in Param's order
        {"w_fc", "mlp.c_fc.weight", MlpParam::FfByD, Sharding::Dim0, true},
        {"b_fc", "mlp.c_fc.bias", MlpParam::Ff, Sharding::Dim0, false},
        {"w_proj", "mlp.c_proj.weight", MlpParam::DByFf, Sharding::Dim1, true},
        {"b_proj", "mlp.c_proj.bias", MlpParam::D, Sharding::Replicated, false},
    };
    return p;
  }
  SavedActs saved(const LayerShape& s) const override {
    return {{s.M * s.F, false, Kept::UnlessFull}, {s.M * s.F, false, Kept::WithoutRecompute}};
  }
  double rerun_flops(const LayerShape& s) const override { return 2.0 * s.M * s.d * s.F; }

  void forward(const LayerOps& o, const MlpTensors& t, CRef in, Ref out, CRef resid, Upto upto) const override {
    const std::vector<size_t>& p = t.params;
    const int M = (int)o.shape.M, d = (int)o.shape.d, F = (int)o.shape.F;
    if (upto != Upto::DroppedOnly) {
      o.be->matmul(false, true, M, F, d, 1.f, in, o.W(p[kWFc]), 0.f, t.saved[kHIn]);
      o.be->add_bias(t.saved[kHIn], o.W(p[kBFc]), M, F);
    }
    o.be->gelu_fwd(t.saved[kHAct], t.saved[kHIn], (size_t)M * F);
    if (upto == Upto::Output) o.row_parallel(out, resid, t.saved[kHAct], F, p[kWProj], p[kBProj], true);
  }

  void backward(const LayerOps& o, const MlpTensors& t, CRef g_out, CRef in, Ref g_in) const override {
    const std::vector<size_t>& p = t.params;
    const int M = (int)o.shape.M, d = (int)o.shape.d, F = (int)o.shape.F;
    o.be->bias_bwd(o.G(p[kBProj]), g_out, (int)o.shape.R, d);
    const CRef gf = o.grad_rows_to_full(g_out);
    o.be->matmul(false, false, M, F, d, 1.f, gf, o.W(p[kWProj]), 0.f, t.scratch[kGHAct]);
    o.be->matmul(true, false, d, F, M, 1.f, gf, t.saved[kHAct], 1.f, o.G(p[kWProj]));
    o.be->gelu_bwd(t.scratch[kGHIn], t.saved[kHIn], t.scratch[kGHAct], (size_t)M * F);
    o.be->matmul(false, false, M, d, F, 1.f, t.scratch[kGHIn], o.W(p[kWFc]), 0.f, g_in);
    o.be->matmul(true, false, F, d, M, 1.f, t.scratch[kGHIn], in, 1.f, o.G(p[kWFc]));
    o.be->bias_bwd(o.G(p[kBFc]), t.scratch[kGHIn], M, F);
  }
};
}  // namespace

const Mlp& gelu_mlp() {
  static const GeluMlp mlp;
  return mlp;
}

}  // namespace trainer
