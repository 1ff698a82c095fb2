#include "model/transformer.h"

namespace trainer {

namespace {
// Carves named slices out of one allocation: first pass counts, second binds.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(size_t n) {
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

Transformer::Transformer(Backend& be, const ModelConfig& cfg, int micro_batch)
    : be_(be), cfg_(cfg), mp_(build_params(cfg)), B_(micro_batch), M_(micro_batch * cfg.seq_len) {
  params_ = be_.alloc(mp_.reg.total());
  grads_ = be_.alloc(mp_.reg.total());
  const size_t M = M_, d = cfg.d_model, L = cfg.n_layers, T = cfg.seq_len;
  const size_t din = cfg.arch == Arch::Llama ? 2 * (size_t)cfg.d_ff : cfg.d_ff;
  auto carve = [&](Carver& c) {
    la_.assign(L, {});
    for (size_t l = 0; l < L; l++) {
      LayerActs& a = la_[l];
      a.resid_in = c.take(M * d);
      a.norm1 = c.take(M * d);
      a.mean1 = c.take(M);
      a.rstd1 = c.take(M);
      a.qkv = c.take(M * cfg.qkv_dim());
      a.probs = c.take((size_t)B_ * cfg.n_heads * T * T);
      a.att = c.take(M * d);
      a.resid_mid = c.take(M * d);
      a.norm2 = c.take(M * d);
      a.mean2 = c.take(M);
      a.rstd2 = c.take(M);
      a.h_in = c.take(M * din);
      a.h_act = c.take(M * cfg.d_ff);
    }
    resid_final_ = c.take(M * d);
    normf_ = c.take(M * d);
    meanf_ = c.take(M);
    rstdf_ = c.take(M);
    logits_ = c.take(M * cfg.vocab_size);
    losses_ = c.take(M);
    g_resid_ = c.take(M * d);
    g_norm_ = c.take(M * d);
    g_att_ = c.take(M * d);
    g_qkv_ = c.take(M * cfg.qkv_dim());
    g_hin_ = c.take(M * din);
    g_act_ = c.take(M * cfg.d_ff);
  };
  Carver count(nullptr);
  carve(count);
  act_floats_ = count.used();
  acts_ = be_.alloc(act_floats_);
  Carver bind(acts_);
  carve(bind);
  inputs_ = be_.alloc_tokens(M);
  targets_ = be_.alloc_tokens(M);
  host_losses_.resize(M);
}

Transformer::~Transformer() {
  be_.free(params_);
  be_.free(grads_);
  be_.free(acts_);
  be_.free_tokens(inputs_);
  be_.free_tokens(targets_);
}

AttentionShape Transformer::attn_shape() const {
  return {B_, cfg_.seq_len, cfg_.n_heads, cfg_.kv_heads(), cfg_.head_dim(), cfg_.qkv_dim()};
}

void Transformer::norm_fwd(float* out, float* mean, float* rstd, const float* x, size_t w,
                           size_t b) {
  if (cfg_.arch == Arch::GPT2)
    be_.layernorm_fwd(out, mean, rstd, x, params_ + w, params_ + b, M_, cfg_.d_model,
                      cfg_.norm_eps);
  else
    be_.rmsnorm_fwd(out, rstd, x, params_ + w, M_, cfg_.d_model, cfg_.norm_eps);
}

void Transformer::norm_bwd(float* dx, const float* dout, const float* x, size_t w, size_t b,
                           const float* mean, const float* rstd) {
  if (cfg_.arch == Arch::GPT2)
    be_.layernorm_bwd(dx, grads_ + w, grads_ + b, dout, x, params_ + w, mean, rstd, M_,
                      cfg_.d_model);
  else
    be_.rmsnorm_bwd(dx, grads_ + w, dout, x, params_ + w, rstd, M_, cfg_.d_model);
}

double Transformer::forward(const int32_t* inputs, const int32_t* targets, float grad_scale) {
  const ModelConfig& c = cfg_;
  const int M = M_, d = c.d_model, F = c.d_ff, Q = c.qkv_dim();
  const bool gpt2 = c.arch == Arch::GPT2;
  const float* P = params_;
  be_.tokens_from_host(inputs_, inputs, M);
  be_.tokens_from_host(targets_, targets, M);
  const AttentionShape as = attn_shape();

  be_.embedding_fwd(la_[0].resid_in, inputs_, P + mp_.wte, gpt2 ? P + mp_.wpe : nullptr, B_,
                    c.seq_len, d);
  for (int l = 0; l < c.n_layers; l++) {
    const LayerParams& lp = mp_.layers[l];
    LayerActs& a = la_[l];
    float* out = (l + 1 < c.n_layers) ? la_[l + 1].resid_in : resid_final_;
    // attention block
    norm_fwd(a.norm1, a.mean1, a.rstd1, a.resid_in, lp.norm1_w, lp.norm1_b);
    be_.matmul(false, true, M, Q, d, 1.f, a.norm1, P + lp.wqkv, 0.f, a.qkv);
    if (gpt2) be_.add_bias(a.qkv, P + lp.bqkv, M, Q);
    else be_.rope(a.qkv, as, c.rope_theta, false);
    be_.attention_fwd(a.att, a.probs, a.qkv, as);
    be_.copy(a.resid_mid, a.resid_in, (size_t)M * d);
    be_.matmul(false, true, M, d, d, 1.f, a.att, P + lp.wo, 1.f, a.resid_mid);
    if (gpt2) be_.add_bias(a.resid_mid, P + lp.bo, M, d);
    // MLP block
    norm_fwd(a.norm2, a.mean2, a.rstd2, a.resid_mid, lp.norm2_w, lp.norm2_b);
    if (gpt2) {
      be_.matmul(false, true, M, F, d, 1.f, a.norm2, P + lp.w_in, 0.f, a.h_in);
      be_.add_bias(a.h_in, P + lp.b_in, M, F);
      be_.gelu_fwd(a.h_act, a.h_in, (size_t)M * F);
    } else {
      be_.matmul(false, true, M, 2 * F, d, 1.f, a.norm2, P + lp.w_in, 0.f, a.h_in);
      be_.swiglu_fwd(a.h_act, a.h_in, M, F);
    }
    be_.copy(out, a.resid_mid, (size_t)M * d);
    be_.matmul(false, true, M, d, F, 1.f, a.h_act, P + lp.w_out, 1.f, out);
    if (gpt2) be_.add_bias(out, P + lp.b_out, M, d);
  }
  norm_fwd(normf_, meanf_, rstdf_, resid_final_, mp_.normf_w, mp_.normf_b);
  be_.matmul(false, true, M, c.vocab_size, d, 1.f, normf_, P + mp_.lm_head, 0.f, logits_);
  be_.cross_entropy(losses_, logits_, targets_, M, c.vocab_size, grad_scale);
  be_.to_host(host_losses_.data(), losses_, M);
  double sum = 0.0;
  for (float x : host_losses_) sum += x;
  return sum / M;
}

void Transformer::backward() {
  const ModelConfig& c = cfg_;
  const int M = M_, d = c.d_model, F = c.d_ff, Q = c.qkv_dim();
  const bool gpt2 = c.arch == Arch::GPT2;
  const float* P = params_;
  float* G = grads_;
  const AttentionShape as = attn_shape();

  // LM head: logits_ holds dlogits after a training forward.
  be_.matmul(false, false, M, d, c.vocab_size, 1.f, logits_, P + mp_.lm_head, 0.f, g_norm_);
  be_.matmul(true, false, c.vocab_size, d, M, 1.f, logits_, normf_, 1.f, G + mp_.lm_head);
  be_.zero(g_resid_, (size_t)M * d);
  norm_bwd(g_resid_, g_norm_, resid_final_, mp_.normf_w, mp_.normf_b, meanf_, rstdf_);

  for (int l = c.n_layers - 1; l >= 0; l--) {
    const LayerParams& lp = mp_.layers[l];
    LayerActs& a = la_[l];
    // MLP block: g_resid is the gradient of this layer's output.
    if (gpt2) be_.bias_bwd(G + lp.b_out, g_resid_, M, d);
    be_.matmul(false, false, M, F, d, 1.f, g_resid_, P + lp.w_out, 0.f, g_act_);
    be_.matmul(true, false, d, F, M, 1.f, g_resid_, a.h_act, 1.f, G + lp.w_out);
    const int din = gpt2 ? F : 2 * F;
    if (gpt2) be_.gelu_bwd(g_hin_, a.h_in, g_act_, (size_t)M * F);
    else be_.swiglu_bwd(g_hin_, a.h_in, g_act_, M, F);
    be_.matmul(false, false, M, d, din, 1.f, g_hin_, P + lp.w_in, 0.f, g_norm_);
    be_.matmul(true, false, din, d, M, 1.f, g_hin_, a.norm2, 1.f, G + lp.w_in);
    if (gpt2) be_.bias_bwd(G + lp.b_in, g_hin_, M, F);
    norm_bwd(g_resid_, g_norm_, a.resid_mid, lp.norm2_w, lp.norm2_b, a.mean2, a.rstd2);
    // Attention block: g_resid is now the gradient of resid_mid.
    if (gpt2) be_.bias_bwd(G + lp.bo, g_resid_, M, d);
    be_.matmul(false, false, M, d, d, 1.f, g_resid_, P + lp.wo, 0.f, g_att_);
    be_.matmul(true, false, d, d, M, 1.f, g_resid_, a.att, 1.f, G + lp.wo);
    be_.attention_bwd(g_qkv_, g_att_, a.qkv, a.probs, as);
    if (!gpt2) be_.rope(g_qkv_, as, c.rope_theta, true);
    be_.matmul(false, false, M, d, Q, 1.f, g_qkv_, P + lp.wqkv, 0.f, g_norm_);
    be_.matmul(true, false, Q, d, M, 1.f, g_qkv_, a.norm1, 1.f, G + lp.wqkv);
    if (gpt2) be_.bias_bwd(G + lp.bqkv, g_qkv_, M, Q);
    norm_bwd(g_resid_, g_norm_, a.resid_in, lp.norm1_w, lp.norm1_b, a.mean1, a.rstd1);
  }
  be_.embedding_bwd(G + mp_.wte, gpt2 ? G + mp_.wpe : nullptr, g_resid_, inputs_, B_,
                    c.seq_len, d);
}

}  // namespace trainer
