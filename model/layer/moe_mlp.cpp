// The Mixture-of-Experts MLP (issue 69): a router (fp32 logits x W_r^T,
// [experts, d]) sends each token row to its top_k experts
// (model/layer/moe_routing.h), each a SwiGLU MLP of its own, and the row's
// output is the residual plus the experts' outputs weighted by the router,
// plus a shared SwiGLU expert's that every row goes to (if the layer has
// one: tp splits it as the dense MLP). Each expert computes the rows it was
// given in one block (the rows in expert order: gather_rows; back in token
// order, weighted: combine_rows); with a capacity, the rows past it are
// dropped and add nothing.
//
// The routing is decided once per micro-batch, on the host (its logits come
// back: one wait per layer and micro-batch), and kept with the micro-batch
// (MoeRoute; its indices and weights also in the saved activations):
// recomputation rebuilds the experts' products from it, never chooses again.
// t.params: the router's, the shared expert's (w_gate, w_up, w_down), then
// each routed expert's: w_gate, w_up (next to each other: one [2 Fe, d]
// product makes both), w_down.
#include <algorithm>

#include "model/layer/mlp.h"

namespace trainer {

namespace {
// t.params: the router's weight, [its selection bias], [the shared expert's
// w_gate, w_up, w_down] (MoeMlp::bias_at_, shared_at_: where, if there).
enum Param { kRouter };
enum SharedParam { kSharedGateUp, kSharedUp, kSharedDown };
enum ExpertParam { kGateUp, kUp, kDown, kPerExpert };
// Saved: the rows in slot order (at most `pairs`: this rank's kept pairs,
// grouped by expert) as gathered and as their experts' outputs came back;
// the experts' gate|up and SwiGLU activation (rows in expert order, at the
// experts); the slots' source rows with the pairs' slots (int32); the pairs'
// weights with the slots'; the shared expert's gate|up and activation (all
// M rows; 0 without one). Under expert parallelism also the rows the
// experts received, in expert order, and the exchange's two permutations
// (int32); 0 without it.
enum Saved { kX, kGU, kH, kY, kIndex, kWeights, kSharedGU, kSharedH, kXe, kExchangeIndex };
// The gradients at the experts (expert order): of their outputs, gate|up,
// activation, inputs; the shared expert's; under expert parallelism the
// gradients in slot order (the weighted outputs', the inputs'), the rows
// in arrival order, the experts' outputs in expert order.
enum Scratch { kGY, kGGU, kGH, kGX, kSharedGGU, kSharedGH, kSlotGY, kSlotGX, kArrived, kExpertY };
enum Scratch32 { kDWeight, kLogits };  // kLogits: the router's logits, then their gradient

class MoeMlp final : public Mlp {
 public:
  MoeMlp(bool shared, bool bias) : shared_(shared) {
    params_ = {{"router.weight", "mlp.gate.weight", MlpParam::EByD, Sharding::Replicated, false}};
    if (bias) {  // chooses, never weighs: no gradient; moved by RankStep after each step
      bias_at_ = (int)params_.size();
      params_.push_back({"router.bias", "mlp.gate.e_score_correction_bias", MlpParam::E, Sharding::Replicated, false});
    }
    if (shared_) {  // in SharedParam's order, split over tp as the dense MLP is
      shared_at_ = (int)params_.size();
      params_.push_back({"shared.w_gate", "mlp.shared_expert.gate_proj.weight", MlpParam::FsByD, Sharding::Dim0, false});
      params_.push_back({"shared.w_up", "mlp.shared_expert.up_proj.weight", MlpParam::FsByD, Sharding::Dim0, false});
      params_.push_back({"shared.w_down", "mlp.shared_expert.down_proj.weight", MlpParam::DByFs, Sharding::Dim1, false});
    }
  }
  const std::vector<MlpParam>& params() const override { return params_; }
  const std::vector<MlpParam>& expert_params() const override {
    static const std::vector<MlpParam> p = {  // in ExpertParam's order
        {"w_gate", "gate_proj.weight", MlpParam::FeByD, Sharding::Replicated, false},
        {"w_up", "up_proj.weight", MlpParam::FeByD, Sharding::Replicated, false},
        {"w_down", "down_proj.weight", MlpParam::DByFe, Sharding::Replicated, false},
    };
    return p;
  }
  // Per token: the router's product, top_k experts' three, the shared
  // expert's three.
  double matmul_params(const ModelConfig& c) const override {
    const MoeConfig& m = c.moe;
    return (double)m.experts * c.d_model + 3.0 * ((double)m.top_k * m.expert_ffn + m.shared_expert_ffn) * c.d_model;
  }
  double stored_params(const ModelConfig& c) const override {
    const MoeConfig& m = c.moe;
    return (double)m.experts * c.d_model * (1 + 3.0 * m.expert_ffn) + 3.0 * m.shared_expert_ffn * c.d_model;
  }
  SavedActs saved(const LayerShape& s) const override {
    const size_t P = s.pairs, X = at_experts(s), Fs = shared_ ? s.Fs : 0;
    return {{P * s.d, false, Kept::UnlessFull},       {X * 2 * s.Fe, false, Kept::UnlessFull},
            {X * s.Fe, false, Kept::WithoutRecompute}, {P * s.d, false, Kept::UnlessFull},
            {2 * P, true, Kept::Always},               {2 * P, true, Kept::Always},
            {s.M * 2 * Fs, false, Kept::UnlessFull},   {s.M * Fs, false, Kept::WithoutRecompute},
            {s.X * s.d, false, Kept::UnlessFull},      {2 * s.X, true, Kept::Always}};
  }
  std::vector<size_t> scratch(const LayerShape& s) const override {
    const size_t P = s.pairs, X = at_experts(s), Fs = shared_ ? s.Fs : 0, ex = s.X ? P * s.d : 0;
    return {X * s.d, X * 2 * s.Fe, X * s.Fe, X * s.d, s.M * 2 * Fs, s.M * Fs, ex, ex, s.X * s.d, s.X * s.d};
  }
  std::vector<size_t> scratch32(const LayerShape& s) const override { return {s.pairs, s.R * s.E}; }
  // Full recomputation reruns every routed expert's products (the outputs
  // too: the backward weighs them) and the shared expert's first; the
  // routing is kept.
  double rerun_flops(const LayerShape& s) const override {
    return 2.0 * s.pairs * s.d * 3 * s.Fe + 2.0 * s.M * s.d * 2 * (shared_ ? s.Fs : 0);
  }

  // Under sequence parallelism each tp rank routes its own rows of `in`
  // (all M rows): the router and the experts see this rank's tokens only,
  // their gradients are partial sums over tp (model/transformer.cpp sums
  // them), and g_in is zero outside this rank's rows. Under expert
  // parallelism the rows travel to the ranks of their experts and back
  // (every ep rank joins every exchange, with or without rows).
  void forward(const LayerOps& o, const MlpTensors& t, CRef in, Ref out, CRef resid, Upto upto) const override {
    const LayerShape& s = o.shape;
    const int R = (int)s.R, d = (int)s.d, E = (int)s.E, k = (int)s.k;
    const CRef x = in + first_row(o) * s.d;  // this rank's rows
    MoeRoute& rt = *t.route;
    int32_t* row_of_slot = static_cast<int32_t*>(t.saved[kIndex].p);
    int32_t* slot_of_pair = row_of_slot + s.pairs;
    float* w_pair = t.saved[kWeights].f32();
    if (upto == Upto::Output) {  // a new micro-batch: route it
      float* logits = (*t.scratch32)[kLogits];
      o.be->matmul(false, true, R, E, d, 1.f, x, o.W(t.params[kRouter]), 0.f, logits);
      rt.logits.resize((size_t)R * E);
      o.be->to_host(rt.logits.data(), logits, rt.logits.size());
      const float* bias = nullptr;
      if (bias_at_ >= 0) {  // (the fp32 master's: the same on every rank)
        rt.bias.resize(E);
        o.be->to_host(rt.bias.data(), t.master + t.params[bias_at_], E);
        bias = rt.bias.data();
      }
      rt.routing = route(*t.router, rt.logits.data(), bias, R);
      rt.plan = dispatch(rt.routing, E, t.router->capacity(R));
      rt.w_slot.resize(rt.plan.kept);
      for (int i = 0; i < rt.plan.kept; i++) rt.w_slot[i] = rt.routing.weight[rt.plan.pair_of_slot[i]];
      o.be->from_host(Ref(row_of_slot, DType::I32), rt.plan.row_of_slot.data(), rt.plan.kept);
      o.be->from_host(Ref(slot_of_pair, DType::I32), rt.plan.slot_of_pair.data(), (size_t)R * k);
      o.be->from_host(w_pair, rt.routing.weight.data(), (size_t)R * k);
      o.be->from_host(w_pair + s.pairs, rt.w_slot.data(), rt.w_slot.size());
      if (o.ep) plan_exchange(o, t, rt);
    }
    const Dispatch& plan = rt.plan;
    const Local loc = local(o, rt);
    const Ref xe = o.ep ? t.saved[kXe] : t.saved[kX];
    const Ref ye = o.ep ? t.scratch[kExpertY] : t.saved[kY];
    if (upto != Upto::DroppedOnly) {
      o.be->gather_rows(t.saved[kX], x, R, row_of_slot, nullptr, plan.kept, d);
      if (o.ep) {  // to the experts' ranks, then in expert order
        exchange(o, rt, t.saved[kX], t.scratch[kArrived], false);
        o.be->gather_rows(xe, t.scratch[kArrived], loc.rows, exchange_index(t, s, 0), nullptr, loc.rows, d);
      }
    }
    for (int e = 0; e < loc.experts; e++) {
      const int rows = loc.count[e];
      if (!rows) continue;
      const size_t f = (size_t)loc.offset[e];
      const Ref xr = xe + f * d, gu = t.saved[kGU] + f * 2 * s.Fe, h = t.saved[kH] + f * s.Fe, y = ye + f * d;
      const size_t* w = &t.params[experts_at() + kPerExpert * e];
      if (upto != Upto::DroppedOnly) o.be->matmul(false, true, rows, 2 * (int)s.Fe, d, 1.f, xr, o.W(w[kGateUp]), 0.f, gu);
      o.be->swiglu_fwd(h, gu, rows, (int)s.Fe);
      if (upto != Upto::DroppedOnly) o.be->matmul(false, true, rows, d, (int)s.Fe, 1.f, h, o.W(w[kDown]), 0.f, y);
    }
    if (o.ep && upto != Upto::DroppedOnly) {  // in arrival order, back to the tokens' ranks
      o.be->gather_rows(t.scratch[kArrived], ye, loc.rows, exchange_index(t, s, 1), nullptr, loc.rows, d);
      exchange(o, rt, t.scratch[kArrived], t.saved[kY], true);
    }
    if (shared_) swiglu_forward(o, (int)s.Fs, shared(t), in, out, resid, upto);
    if (upto != Upto::Output) return;
    if (!shared_) o.be->copy(out, resid, (size_t)R * d);
    o.be->combine_rows(out, t.saved[kY], plan.kept, slot_of_pair, w_pair, R, k, d);
  }

  void backward(const LayerOps& o, const MlpTensors& t, CRef g_out, CRef in, Ref g_in) const override {
    const LayerShape& s = o.shape;
    const int R = (int)s.R, d = (int)s.d, E = (int)s.E, k = (int)s.k, Fe = (int)s.Fe;
    const size_t row0 = first_row(o);
    const CRef x = in + row0 * s.d;
    MoeRoute& rt = *t.route;
    const Dispatch& plan = rt.plan;
    const Local loc = local(o, rt);
    const int32_t* row_of_slot = static_cast<const int32_t*>(t.saved[kIndex].p);
    const int32_t* slot_of_pair = row_of_slot + s.pairs;
    const float* w_slot = t.saved[kWeights].f32() + s.pairs;
    float *dweight = (*t.scratch32)[kDWeight], *dlogits = (*t.scratch32)[kLogits];
    // The router: the gradient of each pair's weight, back on the host with
    // the balancing and z-losses' (one wait). The balancing loss counts
    // whole sequences: their selections summed over the ranks sharing them.
    o.be->row_dots(dweight, g_out, t.saved[kY], plan.kept, slot_of_pair, R, k, d);
    rt.dweight.resize((size_t)R * k), rt.dlogits.resize((size_t)R * E);
    o.be->to_host(rt.dweight.data(), dweight, rt.dweight.size());
    std::vector<float> counts = sequence_counts(rt.routing, E, (int)row0, (int)s.T, (int)s.B);
    if (o.sequence_parallel()) o.tp.control->allreduce_sum(counts.data(), counts.size());
    if (o.cp_control) o.cp_control->allreduce_sum(counts.data(), counts.size());
    const RouterLossSums sums = router_backward(*t.router, rt.logits.data(), rt.routing, rt.dweight.data(), counts,
                                                (int)row0, (int)s.T, (int)s.keys, t.loss_scale, rt.dlogits.data());
    if (t.sums) {
      t.sums->losses.aux += sums.aux, t.sums->losses.z += sums.z;
      t.sums->selections.resize(E);
      for (int32_t e : rt.routing.expert) t.sums->selections[e] += 1;
      t.sums->dropped += plan.dropped, t.sums->expert_rows += loc.rows;
    }
    o.be->from_host(dlogits, rt.dlogits.data(), rt.dlogits.size());
    // The experts, on their rows' gradients weighted as the forward weighed
    // them (under expert parallelism sent to the experts' ranks first).
    const Ref slot_gy = o.ep ? t.scratch[kSlotGY] : t.scratch[kGY];
    o.be->gather_rows(slot_gy, g_out, R, row_of_slot, w_slot, plan.kept, d);
    const Ref xe = o.ep ? t.saved[kXe] : t.saved[kX];
    if (o.ep) {
      exchange(o, rt, slot_gy, t.scratch[kArrived], false);
      o.be->gather_rows(t.scratch[kGY], t.scratch[kArrived], loc.rows, exchange_index(t, s, 0), nullptr, loc.rows, d);
    }
    for (int e = 0; e < loc.experts; e++) {
      const int rows = loc.count[e];
      if (!rows) continue;
      const size_t f = (size_t)loc.offset[e];
      const Ref gy = t.scratch[kGY] + f * d, ggu = t.scratch[kGGU] + f * 2 * Fe, gh = t.scratch[kGH] + f * Fe,
                gx = t.scratch[kGX] + f * d, gu = t.saved[kGU] + f * 2 * Fe, h = t.saved[kH] + f * Fe, xr = xe + f * d;
      const size_t* w = &t.params[experts_at() + kPerExpert * e];
      o.be->matmul(false, false, rows, Fe, d, 1.f, gy, o.W(w[kDown]), 0.f, gh);
      o.be->matmul(true, false, d, Fe, rows, 1.f, gy, h, 1.f, o.G(w[kDown]));
      o.be->swiglu_bwd(ggu, gu, gh, rows, Fe);
      o.be->matmul(false, false, rows, d, 2 * Fe, 1.f, ggu, o.W(w[kGateUp]), 0.f, gx);
      o.be->matmul(true, false, 2 * Fe, d, rows, 1.f, ggu, xr, 1.f, o.G(w[kGateUp]));
    }
    const Ref slot_gx = o.ep ? t.scratch[kSlotGX] : t.scratch[kGX];
    if (o.ep) {  // back in arrival order, to the tokens' ranks
      o.be->gather_rows(t.scratch[kArrived], t.scratch[kGX], loc.rows, exchange_index(t, s, 1), nullptr, loc.rows, d);
      exchange(o, rt, t.scratch[kArrived], slot_gx, true);
    }
    // The input's gradient: the shared expert's (all rows), each row's
    // routed experts' in order, then the router's.
    if (shared_) swiglu_backward(o, (int)s.Fs, shared(t), g_out, in, g_in);
    else o.be->zero(g_in, s.M * s.d);
    const Ref g_x = g_in + row0 * s.d;
    o.be->combine_rows(g_x, slot_gx, plan.kept, slot_of_pair, nullptr, R, k, d);
    const CRef dlo = o.be->product_operand(dlogits, (size_t)R * E, g_in.dt);
    o.be->matmul(false, false, R, d, E, 1.f, dlo, o.W(t.params[kRouter]), 1.f, g_x);
    o.be->matmul(true, false, E, d, R, 1.f, dlo, x, 1.f, o.G(t.params[kRouter]));
  }

 private:
  bool shared_;
  int bias_at_ = -1, shared_at_ = -1;
  std::vector<MlpParam> params_;
  // The most rows at this rank's experts: this rank's pairs, or under
  // expert parallelism what the ep ranks may send.
  static size_t at_experts(const LayerShape& s) { return s.X ? s.X : s.pairs; }
  // This rank's experts' rows: per local expert its count and first row in
  // expert order (the plan's, or the exchange's under expert parallelism).
  struct Local {
    int experts, rows;
    const int *count, *offset;
  };
  static Local local(const LayerOps& o, const MoeRoute& rt) {
    if (!o.ep) return {(int)o.shape.E, rt.plan.kept, rt.plan.count.data(), rt.plan.offset.data()};
    const ExpertExchange& x = rt.exchange;
    return {(int)o.shape.El, x.received, x.count.data(), x.offset.data()};
  }
  // Every ep rank's kept pairs per expert (a host all-gather), the exchange
  // planned from them, its permutations to the device.
  static void plan_exchange(const LayerOps& o, const MlpTensors& t, MoeRoute& rt) {
    const int E = (int)o.shape.E, ep = o.ep->size();
    const std::vector<float> mine(rt.plan.count.begin(), rt.plan.count.end());
    std::vector<float> all((size_t)ep * E);
    o.ep_control->allgather(mine.data(), all.data(), E);
    rt.exchange = expert_exchange(all, ep, o.ep->rank(), E);
    const ExpertExchange& x = rt.exchange;
    o.be->from_host(Ref(exchange_index(t, o.shape, 0), DType::I32), x.to_expert.data(), x.received);
    o.be->from_host(Ref(exchange_index(t, o.shape, 1), DType::I32), x.to_source.data(), x.received);
  }
  // The exchange's permutations on the device: 0 to expert order, 1 back.
  static int32_t* exchange_index(const MlpTensors& t, const LayerShape& s, int which) {
    return static_cast<int32_t*>(t.saved[kExchangeIndex].p) + which * s.X;
  }
  // Rows of d to the experts' ranks (back: from them, the counts swapped).
  static void exchange(const LayerOps& o, const MoeRoute& rt, CRef from, Ref to, bool back) {
    const ExpertExchange& x = rt.exchange;
    const size_t* send = back ? x.recv_rows.data() : x.send_rows.data();
    const size_t* recv = back ? x.send_rows.data() : x.recv_rows.data();
    o.ep->wait(o.ep->start_alltoallv(from, send, to, recv, o.shape.d));
  }
  // The shared expert's tensors.
  SwiGluRefs shared(const MlpTensors& t) const {
    const size_t* p = &t.params[shared_at_];
    return {p[kSharedGateUp], p[kSharedDown], t.saved[kSharedGU], t.saved[kSharedH], t.scratch[kSharedGGU], t.scratch[kSharedGH]};
  }
  // The first routed expert's tensors in t.params.
  size_t experts_at() const { return params_.size(); }
  // This rank's first row of `in`.
  static size_t first_row(const LayerOps& o) { return o.sequence_parallel() ? (size_t)o.tp.rank() * o.shape.R : 0; }
};
}  // namespace

const Mlp& moe_mlp(bool shared_expert, bool bias) {
  static const MoeMlp kinds[2][2] = {{{false, false}, {false, true}}, {{true, false}, {true, true}}};
  return kinds[shared_expert][bias];
}

}  // namespace trainer
