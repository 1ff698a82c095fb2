#include "model/param_registry.h"

#include <algorithm>
#include <stdexcept>

#include "model/layer/attention.h"
#include "model/layer/mlp.h"
#include "model/layer/norm.h"

namespace trainer {

const ParamInfo& ParamRegistry::add(const std::string& name, std::vector<int> global_shape,
                                    bool decay, Sharding sharding, bool seq_partial,
                                    bool tied_copy) {
  ParamInfo p;
  p.name = name;
  p.global_shape = global_shape;
  p.shape = global_shape;
  if (sharding == Sharding::Dim0) p.shape[0] /= tp_;
  if (sharding == Sharding::Dim1) p.shape[1] /= tp_;
  p.sharding = tp_ > 1 ? sharding : Sharding::Replicated;
  p.seq_partial_grad = seq_partial;
  p.tied_copy = tied_copy;
  p.numel = 1;
  for (int d : p.shape) p.numel *= (size_t)d;
  p.offset = total_;
  p.decay = decay;
  p.expert = experts_;
  total_ += p.numel;
  params_.push_back(std::move(p));
  return params_.back();
}

std::vector<std::pair<size_t, size_t>> ParamRegistry::vectors_first(size_t from) {
  std::vector<std::pair<size_t, size_t>> moved;
  if (from >= params_.size()) return moved;
  size_t at = params_[from].offset;
  std::stable_partition(params_.begin() + (long)from, params_.end(),
                        [](const ParamInfo& p) { return p.global_shape.size() == 1; });
  for (size_t i = from; i < params_.size(); i++) {
    moved.push_back({params_[i].offset, at});
    params_[i].offset = at;
    at += params_[i].numel;
  }
  return moved;
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

std::vector<std::pair<std::string, std::string>> validate_tp(const ModelConfig& c, int tp) {
  std::vector<std::pair<std::string, std::string>> err;
  if (tp <= 1) return err;
  auto divides = [&](const char* key, int v, const char* what) {
    if (v % tp != 0)
      err.push_back({key, std::string(what) + " = " + std::to_string(v) +
                              " must be divisible by parallel.tp = " + std::to_string(tp)});
  };
  divides("n_heads", c.n_heads, "n_heads");
  if (c.arch == Arch::Llama) divides("n_kv_heads", c.n_kv_heads, "n_kv_heads");
  divides("d_ff", c.d_ff, "d_ff");
  if (c.moe.enabled()) divides("moe.shared_expert_ffn", c.moe.shared_expert_ffn, "moe.shared_expert_ffn");
  if (c.vocab_size % tp != 0)
    err.push_back({"vocab_size", "vocab_size = " + std::to_string(c.vocab_size) +
                                     " must be divisible by parallel.tp = " + std::to_string(tp) +
                                     " (pad it, e.g. GPT-2's 50257 to 50304)"});
  return err;
}

ModelParams build_params(const ModelConfig& c, int tp_size, int tp_rank, ChunkSpec chunk, int ep, int ep_rank) {
  ModelParams mp;
  mp.reg = ParamRegistry(tp_size, tp_rank);
  if (chunk.last_layer < 0) chunk.last_layer = c.n_layers;
  mp.chunk = chunk;
  mp.tied = c.tie_embeddings;
  ParamRegistry& r = mp.reg;
  const int d = c.d_model;
  const Sharding rep = Sharding::Replicated, col = Sharding::Dim0;
  const Norm& norm = norm_for(c);
  if (chunk.embed) {
    mp.wte = r.add("embed.tok", {c.vocab_size, d}, true, col).offset;
    if (!c.rope_positions()) mp.wpe = r.add("embed.pos", {c.seq_len, d}, true, rep, true).offset;
  }
  for (int l = chunk.first_layer; l < chunk.last_layer; l++) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerParams lp{};
    const size_t first = r.all().size();
    lp.norm1 = norm.add_params(r, p + "attn_norm.", c);
    Attention::add_params(r, p, c, lp);
    lp.norm2 = norm.add_params(r, p + "mlp_norm.", c);
    lp.mlp = mlp_for(c, l).add_params(r, p + "mlp.", c);
    // A layer is [its vectors][its matrices]: under ZeRO-3 the vectors can
    // stay gathered for the step as a unit of their own (model/param_units.h).
    // The layer's first tensor, norm1's weight, stays first: an absent
    // offset (0: no bias) keeps meaning none.
    const auto moved = r.vectors_first(first);
    const auto to = [&moved](size_t& offset) {
      for (const auto& [before, after] : moved)
        if (before == offset) {
          offset = after;
          return;
        }
    };
    for (size_t* o : {&lp.norm1.w, &lp.norm1.b, &lp.wqkv, &lp.bqkv, &lp.wo, &lp.bo, &lp.norm2.w, &lp.norm2.b}) to(*o);
    for (size_t& o : lp.mlp) to(o);
    mp.layers.push_back(lp);
  }
  if (chunk.head) {
    mp.normf = norm.add_params(r, "final_norm.", c);
    if (!c.tie_embeddings) mp.lm_head = r.add("lm_head.weight", {c.vocab_size, d}, true, col).offset;
    else if (chunk.embed) mp.lm_head = mp.wte;
    else mp.lm_head = r.add("embed.tok", {c.vocab_size, d}, true, col, false, true).offset;
  }
  // The experts last, each layer's after the others: one stretch that can
  // be reduced apart (the ranks holding an expert are not all the replicas).
  r.begin_experts();
  for (int l = chunk.first_layer; l < chunk.last_layer; l++) {
    std::vector<size_t>& to = mp.layers[l - chunk.first_layer].mlp;
    const int part = c.moe.experts / ep;
    const std::vector<size_t> experts =
        mlp_for(c, l).add_expert_params(r, "layers." + std::to_string(l) + ".mlp.", c, ep_rank * part, part);
    to.insert(to.end(), experts.begin(), experts.end());
  }
  return mp;
}

}  // namespace trainer
