#include "model/layer/layer_decl.h"

#include "model/layer/attention.h"
#include "model/layer/mlp.h"
#include "model/layer/norm.h"

namespace trainer {

SavedActs layer_saved(const LayerShape& s) {
  const Kept product = Kept::UnlessFull;
  return {
      {s.R * s.d, false, Kept::Always},  // kResidIn
      {s.M * s.d, false, product},       // kNorm1
      {s.R, true, product},              // kMean1
      {s.R, true, product},              // kRstd1
      {s.R * s.d, false, product},       // kResidMid
      {s.M * s.d, false, product},       // kNorm2
      {s.R, true, product},              // kMean2
      {s.R, true, product},              // kRstd2
  };
}

std::vector<size_t> layer_scratch(const LayerShape& s) { return {s.R * s.d, s.M * s.d}; }

std::vector<HfParam> layer_hf_params(const ModelConfig& c) {
  const bool gpt2 = c.arch == Arch::GPT2;
  std::vector<HfParam> out;
  auto norm = [&](const char* ours, const char* theirs) {
    for (const std::string& t : norm_for(c).tensor_names())
      out.push_back({std::string(ours) + "." + t, std::string(theirs) + "." + t});
  };
  norm("attn_norm", gpt2 ? "ln_1" : "input_layernorm");
  for (const HfParam& p : Attention::hf_params(c)) out.push_back(p);
  norm("mlp_norm", gpt2 ? "ln_2" : "post_attention_layernorm");
  // (A dense layer's: Mixture-of-Experts models do not leave for Hugging Face yet.)
  for (const MlpParam& p : mlp_for(c, 0).params()) out.push_back({std::string("mlp.") + p.name, p.hf, p.hf_transposed});
  return out;
}

}  // namespace trainer
