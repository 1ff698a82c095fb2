#include "model/transformer.h"

#include <cstring>
#include <stdexcept>

#include "model/layer/layer_decl.h"
#include "parallel/context_chunks.h"
#include "parallel/context_attention.h"

namespace trainer {

namespace {
// Carves named slices out of one allocation: first pass counts (base.p
// null), second binds. Every slice starts 64-byte aligned.
class Carver {
 public:
  explicit Carver(Ref base) : base_(base) {}
  Ref take(size_t n) {
    if (n == 0) return Ref(nullptr, base_.dt);
    const Ref r = base_.p ? base_ + used_ : Ref(nullptr, base_.dt);
    const size_t align = 64 / dtype_size(base_.dt);
    used_ += (n + align - 1) / align * align;
    return r;
  }
  float* take_f32(size_t n) { return take(n).f32(); }
  size_t used() const { return used_; }

 private:
  Ref base_;
  size_t used_ = 0;
};
}  // namespace

Transformer::Transformer(Backend& be, const ModelConfig& cfg, const RankLayout& layout, const ChunkLayout& chunk,
                         TensorParallel tp, RecomputeConfig recompute, ContextParallel context,
                         ExpertParallel experts)
    : be_(be), cfg_(cfg), tp_(tp),
      mp_(build_params(cfg, tp.size(), tp.rank(), chunk.spec, experts.size(), experts.rank())), norm_(norm_for(cfg)),
      compute_(layout.compute), B_(layout.micro_batch),
      T_(layout.sequence_share(cfg.seq_len)), M_(layout.micro_batch * T_),
      seq_(context.comm ? context.comm->size() : 1, context.comm ? context.comm->rank() : 0, cfg.seq_len),
      rc_(recompute) {
  const int t = tp_.size();
  if (!validate_tp(cfg, t).empty()) throw std::invalid_argument("model does not split over tp");
  if (t != layout.tp) throw std::invalid_argument("the layout's tp differs from the tp group's size");
  if (experts.size() != layout.ep) throw std::invalid_argument("the layout's ep differs from the ep group's size");
  if (compute_ != DType::F32 && compute_ != DType::BF16) throw std::invalid_argument("compute type must be fp32 or bf16");
  const bool sp = layout.sequence_parallel && t > 1;
  if (sp && M_ % t != 0) throw std::invalid_argument("token rows do not split over tp");
  ops_.be = &be_, ops_.tp = tp_, ops_.cp_control = context.control, ops_.shape = layer_shape(cfg, layout);
  ops_.ep = experts.comm, ops_.ep_control = experts.control;
  R_ = (int)ops_.shape.R;
  row_offset_ = sp ? tp_.rank() * R_ : 0;
  V_ = cfg.vocab_size / t;
  vocab_offset_ = tp_.rank() * V_;
  position_runs_ = seq_.runs(row_offset_, R_);
  const MoeConfig& moe = cfg.moe;
  router_ = {moe.experts,   moe.top_k,   moe.score == MoeConfig::Score::Sigmoid, moe.norm_topk,
             moe.aux_coeff, moe.z_coeff, moe.capacity_factor};
  for (int l = mp_.chunk.first_layer; l < mp_.chunk.last_layer; l++) {
    const Mlp* kind = &mlp_for(cfg, l);
    int k = 0;
    while (k < (int)mlp_kinds_.size() && mlp_kinds_[k].mlp != kind) k++;
    if (k == (int)mlp_kinds_.size()) mlp_kinds_.push_back({kind, kind->saved(ops_.shape), {}, {}, {}});
    kind_of_.push_back(k);
  }
  attn_ = std::make_unique<Attention>(be_, cfg, ops_.shape, layout, context.comm, seq_.positions());

  const size_t n = mp_.reg.total();
  units_ = param_units(mp_, layout.persist_below());
  if (layout.weights_sharded()) {
    wopen_.assign(units_.all.size(), CRef());
  } else {
    params_ = be_.alloc(n, DType::F32, Mem::Params);
    if (compute_ != DType::F32) cparams_ = be_.alloc(n, compute_, Mem::Params);
    ops_.weights = compute_ == DType::F32 ? params_.ref() : cparams_.ref();
  }
  if (layout.grads_sharded()) {
    open_.assign(units_.all.size(), nullptr);
  } else {
    grads_ = be_.alloc(n, DType::F32, Mem::Grads);
    ops_.grads = grads_.ref().f32();
    // The gradient norm's spans, grouped sharded over tp (0) / replicated
    // (1) / split over the ep ranks (3: experts under expert parallelism);
    // a tied copy is counted once, with its original.
    for (const ParamInfo& p : mp_.reg.all()) {
      const int group = p.expert && experts.size() > 1 ? 3 : p.sharding == Sharding::Replicated ? 1 : 0;
      if (!p.tied_copy) grad_spans_.push_back({G(p.offset), p.numel, group});
    }
  }
  allocate_activations(chunk.slots);
  moe_sums_.assign(mp_.layers.size(), {});
  host_losses_.resize(M_);
  if (mp_.chunk.head) step_losses_ = be_.alloc(M_, DType::F32, Mem::Activations);
}

// Four allocations, counted apart: activations saved per micro-batch (compute
// type and fp32), backward scratch (temporaries), and buffers collectives
// read or fill. A layer's saved activations and the scratch are carved as
// its parts declare them (model/layer/layer_decl.h, attention.h, mlp.h),
// which the memory plan sums too.
void Transformer::allocate_activations(int slots) {
  const int t = tp_.size();
  const bool sp = R_ < M_;
  const size_t M = M_, R = R_, d = cfg_.d_model, L = mp_.layers.size();
  const bool head = mp_.chunk.head;
  const LayerShape& shape = ops_.shape;
  const SavedActs own = layer_saved(shape), attn = Attention::saved(shape);
  // Selective recomputation reruns only the MLP (Upto::DroppedOnly): nothing
  // else may leave what it drops to be rebuilt.
  for (const SavedActs* d : {&own, &attn})
    for (const SavedAct& a : *d)
      if (a.kept == Kept::WithoutRecompute)
        throw std::logic_error("only the MLP is rebuilt by selective recomputation");
  slots_.clear();
  slots_.resize(slots);
  bool any_recompute = false;
  for (size_t l = 0; l < L; l++) any_recompute |= rc_.applies((int)l);
  // One block's declared activations: its own where `keeps` says so, else
  // the shared recompute workspace's.
  auto carve_saved = [](Carver& c, Carver& f, const SavedActs& decl, std::vector<Ref>& out,
                        const std::vector<Ref>& shared, auto keeps) {
    out.resize(decl.size());
    for (size_t i = 0; i < decl.size(); i++)
      if (keeps(decl[i].kept)) out[i] = (decl[i].fp32 ? f : c).take(decl[i].elems);
      else out[i] = shared[i];
  };
  auto carve_layer = [&](Carver& c, Carver& f, LayerActs& a, MlpKind& kind, auto keeps) {
    carve_saved(c, f, own, a.own, work_.own, keeps);
    carve_saved(c, f, attn, a.attn, work_.attn, keeps);
    carve_saved(c, f, kind.saved, a.mlp, kind.work, keeps);
  };
  auto carve = [&](Carver& c, Carver& f, Carver& tmp, Carver& tmp32, Carver& com) {
    // The workspace holds what the recomputing layers drop: their norms'
    // and attention's, and each MLP kind's of the kind's recomputing layers.
    const auto drops = [&](Kept k) { return !kept_in(k, rc_.mode); };
    work_ = {};
    work_.own.resize(own.size()), work_.attn.resize(attn.size());
    if (any_recompute) carve_saved(c, f, own, work_.own, work_.own, drops), carve_saved(c, f, attn, work_.attn, work_.attn, drops);
    for (size_t k = 0; k < mlp_kinds_.size(); k++) {
      MlpKind& kind = mlp_kinds_[k];
      kind.work.assign(kind.saved.size(), Ref());
      bool recomputed = false;
      for (size_t l = 0; l < L; l++) recomputed |= kind_of_[l] == (int)k && rc_.applies((int)l);
      if (recomputed) carve_saved(c, f, kind.saved, kind.work, kind.work, drops);
    }
    for (Slot& sl : slots_) {
      sl.layers.assign(L, {});
      for (size_t l = 0; l < L; l++) {
        const RecomputeMode mode = rc_.applies((int)l) ? rc_.mode : RecomputeMode::None;
        carve_layer(c, f, sl.layers[l], mlp_kinds_[kind_of_[l]], [&](Kept k) { return kept_in(k, mode); });
      }
      sl.out = c.take(R * d);
      sl.normf = c.take(head ? M * d : 0);
      sl.meanf = f.take_f32(head ? R : 0);
      sl.rstdf = f.take_f32(head ? R : 0);
      sl.logits = f.take_f32(head ? M * V_ : 0);
      sl.losses = f.take_f32(head ? M : 0);
      sl.ce_max = f.take_f32(head ? (t > 1 ? 2 * M : M) : 0);  // this shard's max, then the global one
      sl.ce_stats = f.take_f32(head ? 2 * M : 0);
    }
    std::vector<Ref> g;
    for (size_t n : layer_scratch(shape)) g.push_back(tmp.take(n));
    g_resid_ = g[kGResid], g_norm_ = g[kGNorm];
    attn_scratch_.clear();
    for (size_t n : Attention::scratch(shape)) attn_scratch_.push_back(tmp.take(n));
    for (MlpKind& kind : mlp_kinds_) {
      kind.scratch.clear(), kind.scratch32.clear();
      for (size_t n : kind.mlp->scratch(shape)) kind.scratch.push_back(tmp.take(n));
      for (size_t n : kind.mlp->scratch32(shape)) kind.scratch32.push_back(tmp32.take_f32(n));
    }
    ops_.part = com.take(t > 1 ? M * d : 0);
    ops_.rows_tmp = com.take(sp ? R * d : 0);
    ops_.g_rows = com.take(sp ? R * d : 0);
    ops_.g_full = com.take(sp ? M * d : 0);
  };
  const DType ct = compute_;
  Carver count_a(Ref(nullptr, ct)), count_f(Ref(nullptr, DType::F32)), count_t(Ref(nullptr, ct)),
      count_t32(Ref(nullptr, DType::F32)), count_c(Ref(nullptr, ct));
  carve(count_a, count_f, count_t, count_t32, count_c);
  acts_ = be_.alloc(count_a.used(), ct, Mem::Activations);
  acts32_ = be_.alloc(count_f.used(), DType::F32, Mem::Activations);
  scratch_ = be_.alloc(count_t.used(), ct, Mem::Temporaries);
  scratch32_ = be_.alloc(count_t32.used(), DType::F32, Mem::Temporaries);  // (none without experts)
  comm_ = be_.alloc(count_c.used(), ct, Mem::Comm);
  Carver bind_a(acts_.ref()), bind_f(acts32_.ref()), bind_t(scratch_.ref()), bind_t32(scratch32_.ref()),
      bind_c(comm_.ref());
  carve(bind_a, bind_f, bind_t, bind_t32, bind_c);
  for (Slot& sl : slots_) {
    sl.inputs = be_.alloc(M, DType::I32, Mem::Activations);
    sl.targets = be_.alloc(M, DType::I32, Mem::Activations);
    sl.inputs_host = be_.alloc(M, DType::I32, Mem::Activations, Space::Staging);
    sl.targets_host = be_.alloc(M, DType::I32, Mem::Activations, Space::Staging);
  }
}

void Transformer::stage_tokens(Slot& sl, Buffer& dev, Buffer& host, const int32_t* tokens) {
  be_.synchronize_event(sl.staged);  // this slot's previous copies are done with the staging
  seq_.take(static_cast<int32_t*>(host.host()), tokens, B_);
  be_.from_host_async(dev.ref(), host.host(), M_);
  sl.staged = be_.record_event(Backend::kComputeStream);
}

Transformer::~Transformer() = default;

void Transformer::sync_compute_weights() {
  if (cparams_) be_.convert(cparams_.ref(), params_.ref(), params_.count());
}

CRef Transformer::W(size_t offset) const {
  if (params_) return ops_.W(offset);
  const int u = units_.of(offset);
  if (!wopen_[u]) throw std::logic_error("a weight read outside its unit's lent window");
  return wopen_[u] + (offset - units_.all[u].lo);
}

void Transformer::weights_open(int unit, int pass) {
  if (params_ || unit < 0) return;
  wopen_[unit] = weight_windows_.open(unit, pass);
  const ParamUnit& u = units_.all[unit];
  if (u.persists) ops_.lead_weights = wopen_[unit], ops_.lead_lo = u.lo, ops_.lead_hi = u.hi;
  else ops_.weights = wopen_[unit], ops_.weight_origin = u.lo;
}

void Transformer::weights_close(int unit, int pass) {
  if (params_ || unit < 0) return;
  wopen_[unit] = CRef();
  if (units_.all[unit].persists) ops_.lead_weights = CRef();
  if (!ops_.lead_weights && !ops_.lead_grads) ops_.lead_hi = 0;
  weight_windows_.close(unit, pass);
}

const CpTimes* Transformer::cp_times() const { return attn_->cp_times(); }
void Transformer::reset_cp_times() { attn_->reset_cp_times(); }

// Norm of this rank's rows of x, delivered as all M rows (the input of a
// column-parallel product): gathered over TP under sequence parallelism.
void Transformer::norm_to_full(Ref full, float* mean, float* rstd, CRef x, const NormParams& p) {
  if (R_ == M_) return norm_.forward(ops_, p, full, mean, rstd, x, cfg_.norm_eps);
  norm_.forward(ops_, p, ops_.rows_tmp, mean, rstd, x, cfg_.norm_eps);
  tp_.comm->allgather(ops_.rows_tmp, full, (size_t)R_ * cfg_.d_model);
}

// A layer's MLP tensors: its parameters, activations and the block's scratch
// (a Mixture-of-Experts MLP's also its routing, the backward's loss scale and
// where its router's losses are summed).
MlpTensors Transformer::mlp_tensors(LayerActs& a, const LayerParams& lp) {
  const size_t l = &lp - mp_.layers.data();
  const MlpKind& kind = mlp_kinds_[kind_of_[l]];
  return {lp.mlp,   a.mlp,       kind.scratch,  &kind.scratch32, &router_,
          &a.route, params_ ? params_.ref().f32() : nullptr, loss_scale_, &moe_sums_[l]};
}

// One transformer layer forward: attention, then the MLP block. Recomputation
// reruns it with the same ops on the same inputs, so the rebuilt activations
// are bit-identical; under tensor/sequence parallelism that includes its
// collectives.
void Transformer::layer_fwd(LayerActs& a, const LayerParams& lp, Ref out, Upto upto) {
  const std::vector<Ref>& s = a.own;
  const MlpTensors mlp = mlp_tensors(a, lp);
  if (upto == Upto::DroppedOnly) return mlp_of(lp).forward(ops_, mlp, s[kNorm2], out, s[kResidMid], upto);
  // attention block
  norm_to_full(s[kNorm1], s[kMean1].f32(), s[kRstd1].f32(), s[kResidIn], lp.norm1);
  attn_->forward(ops_, lp, a.attn, s[kNorm1], s[kResidMid], s[kResidIn]);
  // MLP block
  norm_to_full(s[kNorm2], s[kMean2].f32(), s[kRstd2].f32(), s[kResidMid], lp.norm2);
  mlp_of(lp).forward(ops_, mlp, s[kNorm2], out, s[kResidMid], upto);
}

// Vocab-parallel embedding: each rank fills the rows of its tokens, the TP
// reduction completes them.
void Transformer::embed_fwd(Slot& sl, const int32_t* inputs, Ref x0) {
  const int M = M_, d = cfg_.d_model;
  stage_tokens(sl, sl.inputs, sl.inputs_host, inputs);
  const int32_t* tokens = sl.inputs.ref().i32();
  if (R_ < M_) {
    be_.embedding_fwd(ops_.part, tokens, M, W(mp_.wte), vocab_offset_, V_, d);
    tp_.comm->reduce_scatter_sum(ops_.part, x0, (size_t)R_ * d);
  } else {
    be_.embedding_fwd(x0, tokens, M, W(mp_.wte), vocab_offset_, V_, d);
    if (tp_.size() > 1) tp_.comm->allreduce_sum(x0, (size_t)M * d);
  }
  if (!cfg_.rope_positions())
    for (const SequenceShare::Run& run : position_runs_)
      be_.position_fwd(x0 + (size_t)run.row * d, W(mp_.wpe), run.rows, run.pos, cfg_.seq_len, d);
}

// Final norm, LM head (fp32 logits) and the vocab-parallel cross entropy: a
// max and two sums reduced over TP (two passes over the logits). Returns the
// mean loss.
double Transformer::head_fwd(Slot& sl, const int32_t* targets, float grad_scale) {
  const int M = M_, d = cfg_.d_model;
  stage_tokens(sl, sl.targets, sl.targets_host, targets);
  const int32_t* tg = sl.targets.ref().i32();
  norm_to_full(sl.normf, sl.meanf, sl.rstdf, sl.out, mp_.normf);
  be_.matmul(false, true, M, V_, d, 1.f, sl.normf, W(mp_.lm_head), 0.f, sl.logits);
  float *max = sl.ce_max, *sum = sl.ce_stats, *target = sl.ce_stats + M;
  be_.ce_row_stats(max, sum, target, sl.logits, tg, M, V_, vocab_offset_);
  if (tp_.size() > 1) {  // every shard's sum made relative to the global max, then added
    float* global_max = sl.ce_max + M;
    be_.copy(global_max, max, M);
    tp_.comm->allreduce_max(global_max, M);
    be_.ce_rebase(sum, max, global_max, M);
    tp_.comm->allreduce_sum(sl.ce_stats, 2 * (size_t)M);
    max = global_max;
  }
  be_.ce_finish(sl.losses, sl.logits, tg, max, sum, target, M, V_, vocab_offset_, grad_scale);
  if (losses_on_device_ && grad_scale != 0.f) {
    be_.add(step_losses_.ref(), step_losses_.ref(), sl.losses, M);
    return 0.0;
  }
  be_.to_host(host_losses_.data(), sl.losses, M);
  double total = 0.0;
  for (float x : host_losses_) total += x;
  return total / M;
}

void Transformer::nudge_router_bias(const std::vector<double>& selections, double rate) {
  const int E = cfg_.moe.experts;
  std::vector<float> bias(E);
  for (int l = mp_.chunk.first_layer; l < mp_.chunk.last_layer; l++) {
    const ParamInfo* p = mp_.reg.find("layers." + std::to_string(l) + ".mlp.router.bias");
    if (!p) continue;
    const std::vector<float> nudge = bias_nudge(&selections[(size_t)l * E], E, rate);
    const Ref at = params_.ref() + p->offset;
    be_.to_host(bias.data(), at, E);
    for (int e = 0; e < E; e++) bias[e] += nudge[e];
    be_.from_host(at, bias.data(), E);
  }
}

void Transformer::reset_step_losses() {
  if (step_losses_) be_.zero(step_losses_.ref(), M_);
  moe_sums_.assign(mp_.layers.size(), {});
}

std::vector<Backend::SumSpan> Transformer::step_sum_spans(size_t lo, size_t hi) const {
  std::vector<Backend::SumSpan> spans = grad_spans(lo, hi);
  if (step_losses_) spans.push_back({step_losses_.ref().f32(), (size_t)M_, 2, false});
  return spans;
}

double Transformer::forward(int slot, const int32_t* inputs, const int32_t* targets, CRef act_in,
                            float grad_scale) {
  Slot& sl = slots_[slot];
  sl.grad_scale = grad_scale;
  const int L = (int)mp_.layers.size();
  const Ref x0 = L > 0 ? sl.layers[0].own[kResidIn] : sl.out;
  // (ZeRO-3: a head reading the tied embedding keeps its unit open.)
  const bool tied_here = mp_.chunk.embed && mp_.chunk.head && cfg_.tie_embeddings;
  if (mp_.chunk.embed) {
    weights_open(units_.embed, 0);
    embed_fwd(sl, inputs, x0);
    if (!tied_here) weights_close(units_.embed, 0);
  } else {
    be_.copy(x0, act_in, (size_t)R_ * cfg_.d_model);
  }
  for (int l = 0; l < L; l++) {
    weights_open(units_.persisting(l), 0);
    weights_open(units_.layer(l), 0);
    layer_fwd(sl.layers[l], mp_.layers[l], (l + 1 < L) ? sl.layers[l + 1].own[kResidIn] : sl.out, Upto::Output);
    weights_close(units_.layer(l), 0);
    weights_close(units_.persisting(l), 0);
  }
  if (!mp_.chunk.head) return 0.0;
  weights_open(units_.head, 0);
  const double loss = head_fwd(sl, targets, grad_scale);
  weights_close(units_.head, 0);
  if (tied_here) weights_close(units_.embed, 0);
  return loss;
}

// LM head: the slot's logits hold dlogits after a training forward.
void Transformer::head_bwd(Slot& sl) {
  const int M = M_, d = cfg_.d_model;
  const CRef dlogits = be_.product_operand(sl.logits, (size_t)M * V_, compute_);  // rounded once, if at all
  be_.matmul(false, false, M, d, V_, 1.f, dlogits, W(mp_.lm_head), 0.f, g_norm_);
  be_.matmul(true, false, V_, d, M, 1.f, dlogits, sl.normf, 1.f, G(mp_.lm_head));
  be_.zero(g_resid_, (size_t)R_ * d);
  norm_.backward(ops_, mp_.normf, g_resid_, ops_.reduce_input_grad(g_norm_), sl.out, sl.meanf, sl.rstdf);
}

// g_resid_ holds the gradient of layer l's output rows; afterwards, of its input.
void Transformer::layer_bwd(LayerActs& a, const LayerParams& lp, int l) {
  const std::vector<Ref>& s = a.own;
  if (rc_.applies(l))
    layer_fwd(a, lp, Ref(), rc_.mode == RecomputeMode::Full ? Upto::BackwardInputs : Upto::DroppedOnly);
  // MLP block
  mlp_of(lp).backward(ops_, mlp_tensors(a, lp), g_resid_, s[kNorm2], g_norm_);
  norm_.backward(ops_, lp.norm2, g_resid_, ops_.reduce_input_grad(g_norm_), s[kResidMid], s[kMean2].f32(),
                 s[kRstd2].f32());
  // Attention block: g_resid is now the gradient of resid_mid.
  attn_->backward(ops_, lp, a.attn, attn_scratch_, g_resid_, s[kNorm1], g_norm_);
  norm_.backward(ops_, lp.norm1, g_resid_, ops_.reduce_input_grad(g_norm_), s[kResidIn], s[kMean1].f32(),
                 s[kRstd1].f32());
}

float* Transformer::G(size_t offset) {
  if (grads_) return ops_.G(offset);
  const int u = units_.of(offset);
  if (!open_[u]) throw std::logic_error("a gradient written outside its unit's lent window");
  return open_[u] + (offset - units_.all[u].lo);
}

void Transformer::grads_open(int unit) {
  if (grads_ || unit < 0) return;
  open_[unit] = windows_.open(unit);
  const ParamUnit& u = units_.all[unit];
  if (u.persists) ops_.lead_grads = open_[unit], ops_.lead_lo = u.lo, ops_.lead_hi = u.hi;
  else ops_.grads = open_[unit], ops_.grad_origin = u.lo;
}

void Transformer::grads_close(int unit) {
  if (grads_ || unit < 0) return;
  open_[unit] = nullptr;
  if (units_.all[unit].persists) ops_.lead_grads = nullptr;
  if (!ops_.lead_weights && !ops_.lead_grads) ops_.lead_hi = 0;
  windows_.close(unit);
}

void Transformer::backward(int slot, CRef grad_out) {
  Slot& sl = slots_[slot];
  const int R = R_, d = cfg_.d_model;
  loss_scale_ = sl.grad_scale;
  if (mp_.chunk.head) {
    // (A head reading the tied embedding writes its gradient too: that
    // unit is held for the step, model/param_units.h.)
    const bool tied_here = mp_.chunk.embed && cfg_.tie_embeddings;
    if (tied_here) weights_open(units_.embed, 1), grads_open(units_.embed);
    weights_open(units_.head, 1);  // last: the ops read the head's norm
    grads_open(units_.head);
    head_bwd(sl);
    grads_close(units_.head);
    weights_close(units_.head, 1);
    if (tied_here) grads_close(units_.embed), weights_close(units_.embed, 1);
    if (grad_hook_) grad_hook_(mp_.normf.w);
  } else {
    be_.copy(g_resid_, grad_out, (size_t)R * d);
  }
  for (int l = (int)mp_.layers.size() - 1; l >= 0; l--) {
    weights_open(units_.persisting(l), 1);
    weights_open(units_.layer(l), 1);
    grads_open(units_.persisting(l));
    grads_open(units_.layer(l));
    layer_bwd(sl.layers[l], mp_.layers[l], l);
    grads_close(units_.layer(l));
    grads_close(units_.persisting(l));
    weights_close(units_.layer(l), 1);
    weights_close(units_.persisting(l), 1);
    if (grad_hook_) grad_hook_(mp_.layers[l].norm1.w);
  }
  if (!mp_.chunk.embed) {
    if (grad_hook_) grad_hook_(0);
    return;  // g_resid_ is the input gradient to pass back
  }
  // The embedding's forward reduction has the identity (all rows) as backward.
  grads_open(units_.embed);
  const int32_t* tokens = sl.inputs.ref().i32();
  be_.embedding_bwd(G(mp_.wte), ops_.grad_rows_to_full(g_resid_), tokens, M_, vocab_offset_, V_, d);
  if (!cfg_.rope_positions())
    for (const SequenceShare::Run& run : position_runs_)
      be_.position_bwd(G(mp_.wpe), g_resid_ + (size_t)run.row * d, run.rows, run.pos, cfg_.seq_len, d);
  grads_close(units_.embed);
  if (grad_hook_) grad_hook_(0);
}

void Transformer::reduce_sequence_parallel_grads() {
  if (R_ == M_ || !grads_) return;
  for (const ParamInfo& p : mp_.reg.all())
    if (p.seq_partial_grad) tp_.comm->allreduce_sum(G(p.offset), p.numel);
}

void Transformer::reduce_sequence_parallel_grads(int unit, float* window) {
  if (R_ == M_) return;
  const ParamUnit& u = units_.all[unit];
  for (const ParamInfo& p : mp_.reg.all())
    if (p.seq_partial_grad && p.offset >= u.lo && p.offset < u.hi)
      tp_.comm->allreduce_sum(window + (p.offset - u.lo), p.numel);
}

std::vector<Backend::SumSpan> Transformer::grad_spans(size_t lo, size_t hi) const {
  const float* base = grads_.ref().f32();
  std::vector<Backend::SumSpan> clipped;
  for (const Backend::SumSpan& s : grad_spans_) {
    const size_t a = std::max<size_t>(s.x - base, lo), b = std::min<size_t>(s.x - base + s.n, hi);
    if (a < b) clipped.push_back({base + a, b - a, s.group});
  }
  return clipped;
}

double Transformer::grad_sumsq() {
  double sums[4] = {0, 0, 0, 0};  // sharded, replicated, (losses), experts: one backend call, one read
  be_.sumsq_groups(grad_spans_, sums, 4);
  if (tp_.size() > 1) tp_.control->allreduce_sum(&sums[0], 1);
  if (ops_.ep) ops_.ep_control->allreduce_sum(&sums[3], 1);
  return sums[0] + sums[1] + sums[3];
}

}  // namespace trainer
