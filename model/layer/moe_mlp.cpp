// The Mixture-of-Experts MLP (issue 69): a router (fp32 logits x W_r^T,
// [experts, d]) sends each token row to its top_k experts
// (model/layer/moe_routing.h), each a SwiGLU MLP of its own, and the row's
// output is the residual plus the experts' outputs weighted by the router.
// Dropless: every expert computes all the rows it was given, in one block
// of rows per expert (the rows in expert order: gather_rows; back in token
// order, weighted: combine_rows).
//
// The routing is decided once per micro-batch, on the host (its logits come
// back: one wait per layer and micro-batch), and kept with the micro-batch
// (MoeRoute; its indices and weights also in the saved activations):
// recomputation rebuilds the experts' products from it, never chooses again.
// Each expert's tensors follow the router's in t.params: w_gate, w_up (next
// to each other: one [2 Fe, d] product makes both), w_down.
#include <algorithm>

#include "model/layer/mlp.h"

namespace trainer {

namespace {
enum Param { kRouter, kExperts };  // then kPerExpert tensors per expert
enum ExpertParam { kGateUp, kUp, kDown, kPerExpert };
// Rows in expert order (slots, at most `pairs`): the gathered inputs,
// gate|up, the SwiGLU activation, the expert's output; the slots' source
// rows with the pairs' slots (int32); the pairs' weights with the slots'.
enum Saved { kX, kGU, kH, kY, kIndex, kWeights };
enum Scratch { kGY, kGGU, kGH, kGX };
enum Scratch32 { kDWeight, kLogits };  // kLogits: the router's logits, then their gradient

class MoeMlp final : public Mlp {
 public:
  const std::vector<MlpParam>& params() const override {
    static const std::vector<MlpParam> p = {{"router.weight", "mlp.gate.weight", MlpParam::EByD, Sharding::Replicated, false}};
    return p;
  }
  const std::vector<MlpParam>& expert_params() const override {
    static const std::vector<MlpParam> p = {  // in ExpertParam's order
        {"w_gate", "gate_proj.weight", MlpParam::FeByD, Sharding::Replicated, false},
        {"w_up", "up_proj.weight", MlpParam::FeByD, Sharding::Replicated, false},
        {"w_down", "down_proj.weight", MlpParam::DByFe, Sharding::Replicated, false},
    };
    return p;
  }
  // Per token: the router's product and top_k experts' three.
  double matmul_params(const ModelConfig& c) const override {
    return (double)c.moe.experts * c.d_model + 3.0 * c.moe.top_k * c.moe.expert_ffn * c.d_model;
  }
  double stored_params(const ModelConfig& c) const override {
    return (double)c.moe.experts * c.d_model * (1 + 3.0 * c.moe.expert_ffn);
  }
  SavedActs saved(const LayerShape& s) const override {
    const size_t P = s.pairs;
    return {{P * s.d, false, Kept::UnlessFull},       {P * 2 * s.Fe, false, Kept::UnlessFull},
            {P * s.Fe, false, Kept::WithoutRecompute}, {P * s.d, false, Kept::UnlessFull},
            {2 * P, true, Kept::Always},               {2 * P, true, Kept::Always}};
  }
  std::vector<size_t> scratch(const LayerShape& s) const override {
    const size_t P = s.pairs;
    return {P * s.d, P * 2 * s.Fe, P * s.Fe, P * s.d};
  }
  std::vector<size_t> scratch32(const LayerShape& s) const override { return {s.pairs, s.M * s.E}; }
  // Full recomputation reruns every expert product (the outputs too: the
  // backward weighs them); the routing is kept.
  double rerun_flops(const LayerShape& s) const override { return 2.0 * s.pairs * s.d * 3 * s.Fe; }

  void forward(const LayerOps& o, const MlpTensors& t, CRef in, Ref out, CRef resid, Upto upto) const override {
    const LayerShape& s = o.shape;
    const int M = (int)s.M, d = (int)s.d, E = (int)s.E, k = (int)s.k;
    MoeRoute& rt = *t.route;
    int32_t* row_of_slot = static_cast<int32_t*>(t.saved[kIndex].p);
    int32_t* slot_of_pair = row_of_slot + s.pairs;
    float* w_pair = t.saved[kWeights].f32();
    if (upto == Upto::Output) {  // a new micro-batch: route it
      float* logits = (*t.scratch32)[kLogits];
      o.be->matmul(false, true, M, E, d, 1.f, in, o.W(t.params[kRouter]), 0.f, logits);
      rt.logits.resize((size_t)M * E);
      o.be->to_host(rt.logits.data(), logits, rt.logits.size());
      rt.routing = route(*t.router, rt.logits.data(), nullptr, M);
      rt.plan = dispatch(rt.routing, E);
      std::vector<float> w_slot(rt.plan.kept);
      for (int i = 0; i < rt.plan.kept; i++) w_slot[i] = rt.routing.weight[rt.plan.pair_of_slot[i]];
      o.be->from_host(Ref(row_of_slot, DType::I32), rt.plan.row_of_slot.data(), rt.plan.kept);
      o.be->from_host(Ref(slot_of_pair, DType::I32), rt.plan.slot_of_pair.data(), (size_t)M * k);
      o.be->from_host(w_pair, rt.routing.weight.data(), (size_t)M * k);
      o.be->from_host(w_pair + s.pairs, w_slot.data(), w_slot.size());
    }
    const Dispatch& plan = rt.plan;
    if (upto != Upto::DroppedOnly) o.be->gather_rows(t.saved[kX], in, M, row_of_slot, nullptr, plan.kept, d);
    for (int e = 0; e < E; e++) {
      const int rows = plan.count[e];
      if (!rows) continue;
      const Rows r = rows_of(t, s, plan.offset[e]);
      const size_t* w = &t.params[kExperts + kPerExpert * e];
      if (upto != Upto::DroppedOnly)
        o.be->matmul(false, true, rows, 2 * (int)s.Fe, d, 1.f, r.x, o.W(w[kGateUp]), 0.f, r.gu);
      o.be->swiglu_fwd(r.h, r.gu, rows, (int)s.Fe);
      if (upto != Upto::DroppedOnly) o.be->matmul(false, true, rows, d, (int)s.Fe, 1.f, r.h, o.W(w[kDown]), 0.f, r.y);
    }
    if (upto != Upto::Output) return;
    o.be->copy(out, resid, (size_t)M * d);
    o.be->combine_rows(out, t.saved[kY], plan.kept, slot_of_pair, w_pair, M, k, d);
  }

  void backward(const LayerOps& o, const MlpTensors& t, CRef g_out, CRef in, Ref g_in) const override {
    const LayerShape& s = o.shape;
    const int M = (int)s.M, d = (int)s.d, E = (int)s.E, k = (int)s.k, Fe = (int)s.Fe;
    const MoeRoute& rt = *t.route;
    const Dispatch& plan = rt.plan;
    const int32_t* row_of_slot = static_cast<const int32_t*>(t.saved[kIndex].p);
    const int32_t* slot_of_pair = row_of_slot + s.pairs;
    const float* w_slot = t.saved[kWeights].f32() + s.pairs;
    float *dweight = (*t.scratch32)[kDWeight], *dlogits = (*t.scratch32)[kLogits];
    // The router: the gradient of each pair's weight, back on the host with
    // the balancing and z-losses' (one wait).
    o.be->row_dots(dweight, g_out, t.saved[kY], plan.kept, slot_of_pair, M, k, d);
    std::vector<float> dw((size_t)M * k), dl((size_t)M * E);
    o.be->to_host(dw.data(), dweight, dw.size());
    const std::vector<float> counts = sequence_counts(rt.routing, E, 0, (int)s.T, (int)s.B);
    const RouterLossSums sums =
        router_backward(*t.router, rt.logits.data(), rt.routing, dw.data(), counts, 0, (int)s.T, t.loss_scale, dl.data());
    if (t.sums) t.sums->aux += sums.aux, t.sums->z += sums.z;
    o.be->from_host(dlogits, dl.data(), dl.size());
    // The experts, on their rows' gradients weighted as the forward weighed them.
    o.be->gather_rows(t.scratch[kGY], g_out, M, row_of_slot, w_slot, plan.kept, d);
    for (int e = 0; e < E; e++) {
      const int rows = plan.count[e];
      if (!rows) continue;
      const Rows r = rows_of(t, s, plan.offset[e]);
      const size_t off = (size_t)plan.offset[e];
      const Ref gy = t.scratch[kGY] + off * d, ggu = t.scratch[kGGU] + off * 2 * Fe, gh = t.scratch[kGH] + off * Fe,
                gx = t.scratch[kGX] + off * d;
      const size_t* w = &t.params[kExperts + kPerExpert * e];
      o.be->matmul(false, false, rows, Fe, d, 1.f, gy, o.W(w[kDown]), 0.f, gh);
      o.be->matmul(true, false, d, Fe, rows, 1.f, gy, r.h, 1.f, o.G(w[kDown]));
      o.be->swiglu_bwd(ggu, r.gu, gh, rows, Fe);
      o.be->matmul(false, false, rows, d, 2 * Fe, 1.f, ggu, o.W(w[kGateUp]), 0.f, gx);
      o.be->matmul(true, false, 2 * Fe, d, rows, 1.f, ggu, r.x, 1.f, o.G(w[kGateUp]));
    }
    // The input's gradient: each row's experts' in order, then the router's.
    o.be->zero(g_in, (size_t)M * d);
    o.be->combine_rows(g_in, t.scratch[kGX], plan.kept, slot_of_pair, nullptr, M, k, d);
    const CRef dlo = o.be->product_operand(dlogits, (size_t)M * E, g_in.dt);
    o.be->matmul(false, false, M, d, E, 1.f, dlo, o.W(t.params[kRouter]), 1.f, g_in);
    o.be->matmul(true, false, E, d, M, 1.f, dlo, in, 1.f, o.G(t.params[kRouter]));
  }

 private:
  // An expert's block of rows in the saved activations, from its first slot.
  struct Rows {
    Ref x, gu, h, y;
  };
  static Rows rows_of(const MlpTensors& t, const LayerShape& s, int first) {
    const size_t f = (size_t)first;
    return {t.saved[kX] + f * s.d, t.saved[kGU] + f * 2 * s.Fe, t.saved[kH] + f * s.Fe, t.saved[kY] + f * s.d};
  }
};
}  // namespace

const Mlp& moe_mlp() {
  static const MoeMlp mlp;
  return mlp;
}

}  // namespace trainer
