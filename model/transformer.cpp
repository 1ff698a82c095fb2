#include "model/transformer.h"

#include <stdexcept>

namespace trainer {

namespace {
// Carves named slices out of one allocation: first pass counts, second binds.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(size_t n) {
    if (n == 0) return nullptr;
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += (n + 15) / 16 * 16;  // keep every slice 64-byte aligned
    return p;
  }
  size_t used() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};
}  // namespace

Transformer::Transformer(Backend& be, const ModelConfig& cfg, int micro_batch, TensorParallel tp,
                         ChunkSpec chunk, int slots, RecomputeConfig recompute)
    : be_(be), cfg_(cfg), tp_(tp), mp_(build_params(cfg, tp.size(), tp.rank(), chunk)),
      B_(micro_batch), M_(micro_batch * cfg.seq_len), rc_(recompute) {
  const int t = tp_.size();
  if (!validate_tp(cfg, t).empty()) throw std::invalid_argument("model does not split over tp");
  const bool sp = tp_.sequence_parallel && t > 1;
  if (sp && M_ % t != 0) throw std::invalid_argument("token rows do not split over tp");
  R_ = sp ? M_ / t : M_;
  row_offset_ = sp ? tp_.rank() * R_ : 0;
  H_ = cfg.n_heads / t;
  KV_ = cfg.kv_heads() / t;
  F_ = cfg.d_ff / t;
  V_ = cfg.vocab_size / t;
  vocab_offset_ = tp_.rank() * V_;
  Q_ = (H_ + 2 * KV_) * cfg.head_dim();

  params_ = be_.alloc(mp_.reg.total(), Mem::Params);
  grads_ = be_.alloc(mp_.reg.total(), Mem::Grads);
  // The gradient norm's spans, grouped sharded (0) / replicated (1); a tied
  // copy is counted once, with its original.
  for (const ParamInfo& p : mp_.reg.all())
    if (!p.tied_copy) grad_spans_.push_back({grads_ + p.offset, p.numel, p.sharding == Sharding::Replicated ? 1 : 0});
  const size_t M = M_, R = R_, d = cfg.d_model, L = mp_.layers.size(), T = cfg.seq_len;
  const size_t din = cfg.arch == Arch::Llama ? 2 * (size_t)F_ : F_, att = (size_t)H_ * cfg.head_dim();
  const bool head = mp_.chunk.head;
  slots_.assign(slots, {});
  // Three allocations, counted apart: activations saved per micro-batch,
  // backward scratch (temporaries), and buffers collectives read or fill.
  bool any_recompute = false;
  for (size_t l = 0; l < L; l++) any_recompute |= rc_.applies((int)l);
  // A layer's activations other than its input; `own(field)` says whether this
  // layer keeps that field itself or uses the shared recompute workspace.
  auto carve_layer = [&](Carver& c, LayerActs& a, const LayerActs& shared, auto own) {
    a.norm1 = own(0) ? c.take(M * d) : shared.norm1;
    a.mean1 = own(0) ? c.take(R) : shared.mean1;
    a.rstd1 = own(0) ? c.take(R) : shared.rstd1;
    a.qkv = own(0) ? c.take(M * Q_) : shared.qkv;
    a.stats = own(0) ? c.take((size_t)B_ * H_ * T * Backend::kAttentionStats) : shared.stats;
    a.att = own(0) ? c.take(M * att) : shared.att;
    a.resid_mid = own(0) ? c.take(R * d) : shared.resid_mid;
    a.norm2 = own(0) ? c.take(M * d) : shared.norm2;
    a.mean2 = own(0) ? c.take(R) : shared.mean2;
    a.rstd2 = own(0) ? c.take(R) : shared.rstd2;
    a.h_in = own(0) ? c.take(M * din) : shared.h_in;
    a.h_act = own(1) ? c.take(M * F_) : shared.h_act;
  };
  auto carve = [&](Carver& c, Carver& tmp, Carver& com) {
    work_ = {};
    // The workspace holds what the recomputing layers drop: everything but
    // the input for full recomputation, the MLP activation for selective.
    if (any_recompute)
      carve_layer(c, work_, work_, [&](int cls) { return rc_.mode == RecomputeMode::Full || cls == 1; });
    for (Slot& sl : slots_) {
      sl.layers.assign(L, {});
      for (size_t l = 0; l < L; l++) {
        LayerActs& a = sl.layers[l];
        a.resid_in = c.take(R * d);
        const RecomputeMode mode = rc_.applies((int)l) ? rc_.mode : RecomputeMode::None;
        // field class 0: matrix-product outputs, norms, attention statistics; 1: MLP activation
        carve_layer(c, a, work_, [&](int cls) {
          return mode == RecomputeMode::None || (mode == RecomputeMode::Selective && cls == 0);
        });
      }
      sl.out = c.take(R * d);
      sl.normf = c.take(head ? M * d : 0);
      sl.meanf = c.take(head ? R : 0);
      sl.rstdf = c.take(head ? R : 0);
      sl.logits = c.take(head ? M * V_ : 0);
      sl.losses = c.take(head ? M : 0);
      sl.ce_max = c.take(head ? M : 0);
      sl.ce_stats = c.take(head ? 2 * M : 0);
    }
    g_resid_ = tmp.take(R * d);
    g_norm_ = tmp.take(M * d);
    g_att_ = tmp.take(M * att);
    g_qkv_ = tmp.take(M * Q_);
    g_hin_ = tmp.take(M * din);
    g_act_ = tmp.take(M * F_);
    part_ = com.take(t > 1 ? M * d : 0);
    rows_tmp_ = com.take(sp ? R * d : 0);
    g_rows_ = com.take(sp ? R * d : 0);
    g_full_ = com.take(sp ? M * d : 0);
  };
  Carver count_a(nullptr), count_t(nullptr), count_c(nullptr);
  carve(count_a, count_t, count_c);
  acts_ = be_.alloc(count_a.used(), Mem::Activations);
  scratch_ = be_.alloc(count_t.used(), Mem::Temporaries);
  comm_ = count_c.used() ? be_.alloc(count_c.used(), Mem::Comm) : nullptr;
  Carver bind_a(acts_), bind_t(scratch_), bind_c(comm_);
  carve(bind_a, bind_t, bind_c);
  for (Slot& sl : slots_) {
    sl.inputs = be_.alloc_tokens(M);
    sl.targets = be_.alloc_tokens(M);
  }
  host_losses_.resize(M);
}

Transformer::~Transformer() {
  be_.free(params_);
  be_.free(grads_);
  be_.free(acts_);
  be_.free(scratch_);
  be_.free(comm_);
  for (Slot& sl : slots_) {
    be_.free_tokens(sl.inputs);
    be_.free_tokens(sl.targets);
  }
}

AttentionShape Transformer::attn_shape() const {
  return {B_, cfg_.seq_len, H_, KV_, cfg_.head_dim(), Q_};
}

void Transformer::norm_fwd(float* out, float* mean, float* rstd, const float* x, size_t w,
                           size_t b) {
  if (cfg_.arch == Arch::GPT2)
    be_.layernorm_fwd(out, mean, rstd, x, params_ + w, params_ + b, R_, cfg_.d_model,
                      cfg_.norm_eps);
  else
    be_.rmsnorm_fwd(out, rstd, x, params_ + w, R_, cfg_.d_model, cfg_.norm_eps);
}

void Transformer::norm_bwd(float* dx, const float* dout, const float* x, size_t w, size_t b,
                           const float* mean, const float* rstd) {
  if (cfg_.arch == Arch::GPT2)
    be_.layernorm_bwd(dx, grads_ + w, grads_ + b, dout, x, params_ + w, mean, rstd, R_,
                      cfg_.d_model);
  else
    be_.rmsnorm_bwd(dx, grads_ + w, dout, x, params_ + w, rstd, R_, cfg_.d_model);
}

// Norm of this rank's rows of x, delivered as all M rows (the input of a
// column-parallel product): gathered over TP under sequence parallelism.
void Transformer::norm_to_full(float* full, float* mean, float* rstd, const float* x, size_t w,
                               size_t b) {
  if (R_ == M_) return norm_fwd(full, mean, rstd, x, w, b);
  norm_fwd(rows_tmp_, mean, rstd, x, w, b);
  tp_.comm->allgather(rows_tmp_, full, (size_t)R_ * cfg_.d_model);
}

// out[R rows] = resid + in[M, K] @ W^T summed over TP (+ bias): the output of a
// row-parallel product. All-reduce without sequence parallelism, reduce-scatter
// with it; no communication with one rank.
void Transformer::row_parallel(float* out, const float* resid, const float* in, int K,
                               size_t w, size_t b, bool has_bias) {
  const int d = cfg_.d_model;
  const size_t rows_d = (size_t)R_ * d;
  if (tp_.size() == 1) {
    be_.copy(out, resid, rows_d);
    be_.matmul(false, true, M_, d, K, 1.f, in, params_ + w, 1.f, out);
  } else {
    be_.matmul(false, true, M_, d, K, 1.f, in, params_ + w, 0.f, part_);
    if (R_ < M_) {
      tp_.comm->reduce_scatter_sum(part_, rows_tmp_, rows_d);
      be_.add(out, resid, rows_tmp_, rows_d);
    } else {
      tp_.comm->allreduce_sum(part_, rows_d);
      be_.add(out, resid, part_, rows_d);
    }
  }
  if (has_bias) be_.add_bias(out, params_ + b, R_, d);
}

// The gradient of a row-parallel output (this rank's rows) as all M rows.
const float* Transformer::grad_rows_to_full(const float* g) {
  if (R_ == M_) return g;
  tp_.comm->allgather(g, g_full_, (size_t)R_ * cfg_.d_model);
  return g_full_;
}

// The input gradient of a column-parallel product is a partial sum over TP:
// reduce it to this rank's rows.
const float* Transformer::reduce_input_grad(float* g_partial) {
  if (tp_.size() == 1) return g_partial;
  if (R_ < M_) {
    tp_.comm->reduce_scatter_sum(g_partial, g_rows_, (size_t)R_ * cfg_.d_model);
    return g_rows_;
  }
  tp_.comm->allreduce_sum(g_partial, (size_t)M_ * cfg_.d_model);
  return g_partial;
}

// One transformer layer forward. Recomputation reruns it with the same ops
// on the same inputs, so the rebuilt activations are bit-identical; under
// tensor/sequence parallelism that includes its collectives.
void Transformer::layer_fwd(LayerActs& a, const LayerParams& lp, float* out, Upto upto) {
  const ModelConfig& c = cfg_;
  const int M = M_, d = c.d_model, F = F_, Q = Q_, hd = c.head_dim();
  const bool gpt2 = c.arch == Arch::GPT2;
  const float* P = params_;
  const AttentionShape as = attn_shape();
  auto activation = [&] {
    if (gpt2) be_.gelu_fwd(a.h_act, a.h_in, (size_t)M * F);
    else be_.swiglu_fwd(a.h_act, a.h_in, M, F);
  };
  if (upto == Upto::DroppedOnly) {  // selective: the MLP activation only
    activation();
    return;
  }
  // attention block
  norm_to_full(a.norm1, a.mean1, a.rstd1, a.resid_in, lp.norm1_w, lp.norm1_b);
  be_.matmul(false, true, M, Q, d, 1.f, a.norm1, P + lp.wqkv, 0.f, a.qkv);
  if (gpt2) be_.add_bias(a.qkv, P + lp.bqkv, M, Q);
  else be_.rope(a.qkv, as, c.rope_theta, false);
  be_.attention_fwd(a.att, a.stats, a.qkv, as);
  row_parallel(a.resid_mid, a.resid_in, a.att, H_ * hd, lp.wo, lp.bo, gpt2);
  // MLP block
  norm_to_full(a.norm2, a.mean2, a.rstd2, a.resid_mid, lp.norm2_w, lp.norm2_b);
  be_.matmul(false, true, M, gpt2 ? F : 2 * F, d, 1.f, a.norm2, P + lp.w_in, 0.f, a.h_in);
  if (gpt2) be_.add_bias(a.h_in, P + lp.b_in, M, F);
  activation();
  if (upto == Upto::Output) row_parallel(out, a.resid_mid, a.h_act, F, lp.w_out, lp.b_out, gpt2);
}

double Transformer::forward(int slot, const int32_t* inputs, const int32_t* targets,
                            const float* act_in, float grad_scale) {
  const ModelConfig& c = cfg_;
  const int M = M_, d = c.d_model;
  const bool gpt2 = c.arch == Arch::GPT2;
  const float* P = params_;
  Slot& sl = slots_[slot];
  const int L = (int)mp_.layers.size();

  float* x0 = L > 0 ? sl.layers[0].resid_in : sl.out;
  if (mp_.chunk.embed) {
    // Vocab-parallel embedding: each rank fills the rows of its tokens, the
    // TP reduction completes them.
    be_.tokens_from_host(sl.inputs, inputs, M);
    if (R_ < M_) {
      be_.embedding_fwd(part_, sl.inputs, M, P + mp_.wte, vocab_offset_, V_, d);
      tp_.comm->reduce_scatter_sum(part_, x0, (size_t)R_ * d);
    } else {
      be_.embedding_fwd(x0, sl.inputs, M, P + mp_.wte, vocab_offset_, V_, d);
      if (tp_.size() > 1) tp_.comm->allreduce_sum(x0, (size_t)M * d);
    }
    if (gpt2) be_.position_fwd(x0, P + mp_.wpe, R_, row_offset_, c.seq_len, d);
  } else {
    be_.copy(x0, act_in, (size_t)R_ * d);
  }

  for (int l = 0; l < L; l++)
    layer_fwd(sl.layers[l], mp_.layers[l], (l + 1 < L) ? sl.layers[l + 1].resid_in : sl.out,
              Upto::Output);
  if (!mp_.chunk.head) return 0.0;
  be_.tokens_from_host(sl.targets, targets, M);
  norm_to_full(sl.normf, sl.meanf, sl.rstdf, sl.out, mp_.normf_w, mp_.normf_b);
  be_.matmul(false, true, M, V_, d, 1.f, sl.normf, P + mp_.lm_head, 0.f, sl.logits);

  // Vocab-parallel cross entropy: a max and two sums reduced over TP.
  be_.row_max(sl.ce_max, sl.logits, M, V_);
  if (tp_.size() > 1) tp_.comm->allreduce_max(sl.ce_max, M);
  be_.ce_exp_sum(sl.ce_stats, sl.ce_stats + M, sl.logits, sl.targets, sl.ce_max, M, V_,
                 vocab_offset_, grad_scale != 0.f);
  if (tp_.size() > 1) tp_.comm->allreduce_sum(sl.ce_stats, 2 * (size_t)M);
  be_.ce_finish(sl.losses, sl.logits, sl.targets, sl.ce_max, sl.ce_stats, sl.ce_stats + M, M,
                V_, vocab_offset_, grad_scale);
  be_.to_host(host_losses_.data(), sl.losses, M);
  double sum = 0.0;
  for (float x : host_losses_) sum += x;
  return sum / M;
}

void Transformer::backward(int slot, const float* grad_out) {
  const ModelConfig& c = cfg_;
  const int M = M_, R = R_, d = c.d_model, F = F_, Q = Q_, A = H_ * c.head_dim();
  const bool gpt2 = c.arch == Arch::GPT2;
  const float* P = params_;
  float* G = grads_;
  Slot& sl = slots_[slot];
  const AttentionShape as = attn_shape();

  if (mp_.chunk.head) {
    // LM head: the slot's logits hold dlogits after a training forward.
    be_.matmul(false, false, M, d, V_, 1.f, sl.logits, P + mp_.lm_head, 0.f, g_norm_);
    be_.matmul(true, false, V_, d, M, 1.f, sl.logits, sl.normf, 1.f, G + mp_.lm_head);
    be_.zero(g_resid_, (size_t)R * d);
    norm_bwd(g_resid_, reduce_input_grad(g_norm_), sl.out, mp_.normf_w, mp_.normf_b,
             sl.meanf, sl.rstdf);
  } else {
    be_.copy(g_resid_, grad_out, (size_t)R * d);
  }

  for (int l = (int)mp_.layers.size() - 1; l >= 0; l--) {
    const LayerParams& lp = mp_.layers[l];
    LayerActs& a = sl.layers[l];
    if (rc_.applies(l))
      layer_fwd(a, lp, nullptr, rc_.mode == RecomputeMode::Full ? Upto::BackwardInputs : Upto::DroppedOnly);
    // MLP block: g_resid is the gradient of this layer's output rows.
    if (gpt2) be_.bias_bwd(G + lp.b_out, g_resid_, R, d);
    const float* gf = grad_rows_to_full(g_resid_);
    be_.matmul(false, false, M, F, d, 1.f, gf, P + lp.w_out, 0.f, g_act_);
    be_.matmul(true, false, d, F, M, 1.f, gf, a.h_act, 1.f, G + lp.w_out);
    const int din = gpt2 ? F : 2 * F;
    if (gpt2) be_.gelu_bwd(g_hin_, a.h_in, g_act_, (size_t)M * F);
    else be_.swiglu_bwd(g_hin_, a.h_in, g_act_, M, F);
    be_.matmul(false, false, M, d, din, 1.f, g_hin_, P + lp.w_in, 0.f, g_norm_);
    be_.matmul(true, false, din, d, M, 1.f, g_hin_, a.norm2, 1.f, G + lp.w_in);
    if (gpt2) be_.bias_bwd(G + lp.b_in, g_hin_, M, F);
    norm_bwd(g_resid_, reduce_input_grad(g_norm_), a.resid_mid, lp.norm2_w, lp.norm2_b,
             a.mean2, a.rstd2);
    // Attention block: g_resid is now the gradient of resid_mid.
    if (gpt2) be_.bias_bwd(G + lp.bo, g_resid_, R, d);
    gf = grad_rows_to_full(g_resid_);
    be_.matmul(false, false, M, A, d, 1.f, gf, P + lp.wo, 0.f, g_att_);
    be_.matmul(true, false, d, A, M, 1.f, gf, a.att, 1.f, G + lp.wo);
    be_.attention_bwd(g_qkv_, g_att_, a.qkv, a.stats, as);
    if (!gpt2) be_.rope(g_qkv_, as, c.rope_theta, true);
    be_.matmul(false, false, M, d, Q, 1.f, g_qkv_, P + lp.wqkv, 0.f, g_norm_);
    be_.matmul(true, false, Q, d, M, 1.f, g_qkv_, a.norm1, 1.f, G + lp.wqkv);
    if (gpt2) be_.bias_bwd(G + lp.bqkv, g_qkv_, M, Q);
    norm_bwd(g_resid_, reduce_input_grad(g_norm_), a.resid_in, lp.norm1_w, lp.norm1_b,
             a.mean1, a.rstd1);
  }
  if (!mp_.chunk.embed) return;  // g_resid_ is the input gradient to pass back
  // The embedding's forward reduction has the identity (all rows) as backward.
  be_.embedding_bwd(G + mp_.wte, grad_rows_to_full(g_resid_), sl.inputs, M, vocab_offset_, V_, d);
  if (gpt2) be_.position_bwd(G + mp_.wpe, g_resid_, R, row_offset_, c.seq_len, d);
}

void Transformer::reduce_sequence_parallel_grads() {
  if (R_ == M_) return;
  for (const ParamInfo& p : mp_.reg.all())
    if (p.seq_partial_grad) tp_.comm->allreduce_sum(grads_ + p.offset, p.numel);
}

double Transformer::grad_sumsq() {
  double sums[2] = {0, 0};  // sharded, replicated: one backend call, one read
  be_.sumsq_groups(grad_spans_, sums, 2);
  if (tp_.size() > 1) tp_.comm->allreduce_sum(&sums[0], 1);
  return sums[0] + sums[1];
}

}  // namespace trainer
