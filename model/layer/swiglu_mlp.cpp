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
    swiglu_forward(o, (int)o.shape.F, refs(t), in, out, resid, upto);
  }
  void backward(const LayerOps& o, const MlpTensors& t, CRef g_out, CRef in, Ref g_in) const override {
    swiglu_backward(o, (int)o.shape.F, refs(t), g_out, in, g_in);
  }

 private:
  static SwiGluRefs refs(const MlpTensors& t) {
    return {t.params[kWGateUp], t.params[kWDown], t.saved[kGateUp], t.saved[kHAct], t.scratch[kGGateUp], t.scratch[kGHAct]};
  }
};
}  // namespace

void swiglu_forward(const LayerOps& o, int F, const SwiGluRefs& t, CRef in, Ref out, CRef resid, Upto upto) {
  const int M = (int)o.shape.M, d = (int)o.shape.d;
  if (upto != Upto::DroppedOnly) o.be->matmul(false, true, M, 2 * F, d, 1.f, in, o.W(t.w_gate_up), 0.f, t.gate_up);
  o.be->swiglu_fwd(t.h, t.gate_up, M, F);
  if (upto == Upto::Output) o.row_parallel(out, resid, t.h, F, t.w_down, 0, false);
}

void swiglu_backward(const LayerOps& o, int F, const SwiGluRefs& t, CRef g_out, CRef in, Ref g_in) {
  const int M = (int)o.shape.M, d = (int)o.shape.d;
  const CRef gf = o.grad_rows_to_full(g_out);
  o.be->matmul(false, false, M, F, d, 1.f, gf, o.W(t.w_down), 0.f, t.g_h);
  o.be->matmul(true, false, d, F, M, 1.f, gf, t.h, 1.f, o.G(t.w_down));
  o.be->swiglu_bwd(t.g_gate_up, t.gate_up, t.g_h, M, F);
  o.be->matmul(false, false, M, d, 2 * F, 1.f, t.g_gate_up, o.W(t.w_gate_up), 0.f, g_in);
  o.be->matmul(true, false, 2 * F, d, M, 1.f, t.g_gate_up, in, 1.f, o.G(t.w_gate_up));
}

const Mlp& swiglu_mlp() {
  static const SwiGluMlp mlp;
  return mlp;
}

}  // namespace trainer
