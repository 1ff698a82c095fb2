#include "model/layer/mlp.h"

namespace trainer {

std::vector<int> MlpParam::global_shape(const ModelConfig& c) const {
  switch (shape) {
    case FfByD: return {c.d_ff, c.d_model};
    case Ff: return {c.d_ff};
    case DByFf: return {c.d_model, c.d_ff};
    case D: return {c.d_model};
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

double Mlp::matmul_params(const ModelConfig& c) const {
  double n = 0;
  for (const MlpParam& p : params())
    if (p.matrix()) n += (double)c.d_ff * c.d_model;
  return n;
}

std::vector<size_t> Mlp::scratch(const LayerShape& s) const {
  std::vector<size_t> n;
  for (const SavedAct& a : saved(s)) n.push_back(a.elems);
  return n;
}

const Mlp& mlp_for(const ModelConfig& c) { return c.arch == Arch::Llama ? swiglu_mlp() : gelu_mlp(); }

}  // namespace trainer
