#pragma once
// Transformer shape. Filled by app/ from the recipe; validated here so the
// rules live next to the model that needs them.
#include <string>
#include <vector>

#include "runtime/rope.h"

namespace trainer {

enum class Arch { GPT2, Llama };

// Mixture-of-Experts MLPs (recipe section [moe]; model/layer/moe_mlp.h):
// experts = 0 keeps every MLP dense.
struct MoeConfig {
  enum class Score { Softmax, Sigmoid };
  int experts = 0;
  int top_k = 2;           // experts each token goes to
  int expert_ffn = 0;      // each expert's hidden width (the recipe's default: d_ff)
  Score score = Score::Softmax;
  bool norm_topk = true;   // the chosen experts' weights divided by their sum
  double aux_coeff = 0.01, z_coeff = 0.001;  // balancing loss, router z-loss (model/layer/moe_routing.h)
  int shared_expert_ffn = 0;  // hidden width of an expert every token goes to (0: none)
  int dense_layers = 0;       // the first layers keep a dense MLP
  // An expert takes at most ceil(capacity_factor x k x rows / experts) of a
  // rank's micro-batch rows; the rest are dropped (0: none are).
  double capacity_factor = 0;
  // Auxiliary-loss-free balancing (DeepSeek-V3): each router's selection
  // bias moves by bias_rate toward its experts' mean load after each step
  // (0: no bias).
  double bias_rate = 0;
  bool enabled() const { return experts > 0; }
  // Whether layer l's MLP has experts.
  bool in_layer(int l) const { return enabled() && l >= dense_layers; }
};

struct ModelConfig {
  Arch arch = Arch::GPT2;
  int vocab_size = 256;
  int d_model = 128;
  int n_layers = 4;
  int n_heads = 4;
  int n_kv_heads = 4;  // llama only; gpt2 uses n_heads
  int d_ff = 512;
  int seq_len = 128;
  bool tie_embeddings = true;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.f;                // llama only
  RopeScaling rope_scaling;                  // llama only; type None: plain RoPE
  MoeConfig moe;

  RopeFreqs rope() const { return {rope_theta, rope_scaling}; }

  int head_dim() const { return d_model / n_heads; }
  int kv_heads() const { return arch == Arch::Llama ? n_kv_heads : n_heads; }
  // floats per token of the packed q|k|v projection
  int qkv_dim() const { return (n_heads + 2 * kv_heads()) * head_dim(); }
  bool has_bias() const { return arch == Arch::GPT2; }
  // Positions: learned vectors added to the embedding (GPT-2), or rotations
  // of queries and keys (RoPE, Llama).
  bool rope_positions() const { return arch == Arch::Llama; }
};

const char* arch_name(Arch a);

// Each problem as (key, message); empty when the shape is consistent.
std::vector<std::pair<std::string, std::string>> validate(const ModelConfig& c);

}  // namespace trainer
