// Llama's MLP: h = silu(x W_gate^T) * (x W_up^T), out = h W_down^T, no
// biases. W_gate and W_up are laid out next to each other so that one
// column-parallel product [2 F, d] makes both (this rank's F hidden units of
// each); W_down is row-parallel.
#include "model/layer/mlp.h"

namespace trainer {

namespace {
enum Param { kWGateUp, kWUp, kWDown };  // w_gate's offset is the fused [w_gate | w_up]'s
enum Saved { kGateUp, kHAct };
enum Scratch { kGGateUp, kGHAct };  // their gradients (Mlp::scratch)

class SwiGluMlp final : public Mlp {
 public:
  const std::vector<MlpParam>& params() const override {
    static const std::vector<MlpParam> p = {  // in Param's order
        {"w_gate", "mlp.gate_proj.weight", MlpParam::FfByD, Sharding::Dim0, false},
        {"w_up", "mlp.up_proj.weight", MlpParam::FfByD, Sharding::Dim0, false},
        {"w_down", "mlp.down_proj.weight", MlpParam::DByFf, Sharding::Dim1, false},
    };
    return p;
  }
  SavedActs saved(const LayerShape& s) const override {
    return {{s.M * 2 * s.F, false, Kept::UnlessFull}, {s.M * s.F, false, Kept::WithoutRecompute}};
  }
  double rerun_flops(const LayerShape& s) const override { return 2.0 * s.M * s.d * (2 * s.F); }

  void forward(const LayerOps& o, const MlpTensors& t, CRef in, Ref out, CRef resid, Upto upto) const override {
    const std::vector<size_t>& p = t.params;
    const int M = (int)o.shape.M, d = (int)o.shape.d, F = (int)o.shape.F;
    if (upto != Upto::DroppedOnly)
      o.be->matmul(false, true, M, 2 * F, d, 1.f, in, o.W(p[kWGateUp]), 0.f, t.saved[kGateUp]);
    o.be->swiglu_fwd(t.saved[kHAct], t.saved[kGateUp], M, F);
    if (upto == Upto::Output) o.row_parallel(out, resid, t.saved[kHAct], F, p[kWDown], 0, false);
  }

  void backward(const LayerOps& o, const MlpTensors& t, CRef g_out, CRef in, Ref g_in) const override {
    const std::vector<size_t>& p = t.params;
    const int M = (int)o.shape.M, d = (int)o.shape.d, F = (int)o.shape.F;
    const CRef gf = o.grad_rows_to_full(g_out);
    o.be->matmul(false, false, M, F, d, 1.f, gf, o.W(p[kWDown]), 0.f, t.scratch[kGHAct]);
    o.be->matmul(true, false, d, F, M, 1.f, gf, t.saved[kHAct], 1.f, o.G(p[kWDown]));
    o.be->swiglu_bwd(t.scratch[kGGateUp], t.saved[kGateUp], t.scratch[kGHAct], M, F);
    o.be->matmul(false, false, M, d, 2 * F, 1.f, t.scratch[kGGateUp], o.W(p[kWGateUp]), 0.f, g_in);
    o.be->matmul(true, false, 2 * F, d, M, 1.f, t.scratch[kGGateUp], in, 1.f, o.G(p[kWGateUp]));
  }
};
}  // namespace

const Mlp& swiglu_mlp() {
  static const SwiGluMlp mlp;
  return mlp;
}

}  // namespace trainer
