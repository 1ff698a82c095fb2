#include "model/layer/mlp.h"

namespace trainer {

std::vector<int> MlpParam::global_shape(const ModelConfig& c) const {
  switch (shape) {
    case FfByD: return {c.d_ff, c.d_model};
    case Ff: return {c.d_ff};
    case DByFf: return {c.d_model, c.d_ff};
    case D: return {c.d_model};
    case EByD: return {c.moe.experts, c.d_model};
    case E: return {c.moe.experts};
    case FeByD: return {c.moe.expert_ffn, c.d_model};
    case DByFe: return {c.d_model, c.moe.expert_ffn};
    case FsByD: return {c.moe.shared_expert_ffn, c.d_model};
    case DByFs: return {c.d_model, c.moe.shared_expert_ffn};
  }
  return {};
}

std::vector<size_t> Mlp::add_params(ParamRegistry& r, const std::string& prefix, const ModelConfig& c) const {
  std::vector<size_t> offsets;
  for (const MlpParam& p : params())
    offsets.push_back(r.add(prefix + p.name, p.global_shape(c), p.matrix(), p.sharding,
                            p.sharding == Sharding::Replicated).offset);
  return offsets;
}

const std::vector<MlpParam>& Mlp::expert_params() const {
  static const std::vector<MlpParam> none;
  return none;
}

std::vector<size_t> Mlp::add_expert_params(ParamRegistry& r, const std::string& prefix, const ModelConfig& c, int first,
                                           int count) const {
  std::vector<size_t> offsets;
  for (int e = first; e < first + count && !expert_params().empty(); e++)
    for (const MlpParam& p : expert_params())
      offsets.push_back(r.add(prefix + "experts." + std::to_string(e) + "." + p.name, p.global_shape(c), p.matrix(),
                              p.sharding, p.sharding == Sharding::Replicated).offset);
  return offsets;
}

double Mlp::matmul_params(const ModelConfig& c) const {
  double n = 0;
  for (const MlpParam& p : params())
    if (p.matrix()) {
      const std::vector<int> g = p.global_shape(c);
      n += (double)g[0] * g[1];
    }
  return n;
}

std::vector<size_t> Mlp::scratch(const LayerShape& s) const {
  std::vector<size_t> n;
  for (const SavedAct& a : saved(s)) n.push_back(a.elems);
  return n;
}

const Mlp& mlp_for(const ModelConfig& c, int l) {
  if (c.moe.in_layer(l)) return moe_mlp(c.moe.shared_expert_ffn > 0, c.moe.bias_rate > 0);
  return c.arch == Arch::Llama ? swiglu_mlp() : gelu_mlp();
}

}  // namespace trainer
