#include "model/param_registry.h"

#include <stdexcept>

namespace trainer {

const ParamInfo& ParamRegistry::add(const std::string& name, std::vector<int> shape,
                                    bool decay) {
  ParamInfo p;
  p.name = name;
  p.numel = 1;
  for (int d : shape) p.numel *= (size_t)d;
  p.shape = std::move(shape);
  p.offset = total_;
  p.decay = decay;
  total_ += p.numel;
  params_.push_back(std::move(p));
  return params_.back();
}

const ParamInfo* ParamRegistry::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParamRegistry::at(const std::string& name) const {
  if (const ParamInfo* p = find(name)) return *p;
  throw std::out_of_range("no parameter named " + name);
}

ModelParams build_params(const ModelConfig& c) {
  ModelParams mp;
  ParamRegistry& r = mp.reg;
  const int d = c.d_model, hd = c.head_dim(), H = c.n_heads, KV = c.kv_heads();
  const bool bias = c.has_bias();
  const bool gpt2 = c.arch == Arch::GPT2;
  mp.wte = r.add("embed.tok", {c.vocab_size, d}, true).offset;
  if (gpt2) mp.wpe = r.add("embed.pos", {c.seq_len, d}, true).offset;
  for (int l = 0; l < c.n_layers; l++) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerParams lp{};
    lp.norm1_w = r.add(p + "attn_norm.weight", {d}, false).offset;
    if (bias) lp.norm1_b = r.add(p + "attn_norm.bias", {d}, false).offset;
    lp.wqkv = r.add(p + "attn.wq", {H * hd, d}, true).offset;
    r.add(p + "attn.wk", {KV * hd, d}, true);
    r.add(p + "attn.wv", {KV * hd, d}, true);
    if (bias) {
      lp.bqkv = r.add(p + "attn.bq", {H * hd}, false).offset;
      r.add(p + "attn.bk", {KV * hd}, false);
      r.add(p + "attn.bv", {KV * hd}, false);
    }
    lp.wo = r.add(p + "attn.wo", {d, H * hd}, true).offset;
    if (bias) lp.bo = r.add(p + "attn.bo", {d}, false).offset;
    lp.norm2_w = r.add(p + "mlp_norm.weight", {d}, false).offset;
    if (bias) lp.norm2_b = r.add(p + "mlp_norm.bias", {d}, false).offset;
    if (gpt2) {
      lp.w_in = r.add(p + "mlp.w_fc", {c.d_ff, d}, true).offset;
      lp.b_in = r.add(p + "mlp.b_fc", {c.d_ff}, false).offset;
      lp.w_out = r.add(p + "mlp.w_proj", {d, c.d_ff}, true).offset;
      lp.b_out = r.add(p + "mlp.b_proj", {d}, false).offset;
    } else {
      lp.w_in = r.add(p + "mlp.w_gate", {c.d_ff, d}, true).offset;
      r.add(p + "mlp.w_up", {c.d_ff, d}, true);
      lp.w_out = r.add(p + "mlp.w_down", {d, c.d_ff}, true).offset;
    }
    mp.layers.push_back(lp);
  }
  mp.normf_w = r.add("final_norm.weight", {d}, false).offset;
  if (bias) mp.normf_b = r.add("final_norm.bias", {d}, false).offset;
  mp.lm_head = c.tie_embeddings ? mp.wte : r.add("lm_head.weight", {c.vocab_size, d}, true).offset;
  return mp;
}

}  // namespace trainer
