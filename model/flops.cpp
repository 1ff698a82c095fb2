#include "model/flops.h"

#include <algorithm>

#include "model/layer/attention.h"
#include "model/layer/mlp.h"

namespace trainer {

namespace {
// Layer l's training FLOPs per token: its products' and attention's scores.
double layer_flops(const ModelConfig& c, int l) {
  return 6.0 * (mlp_for(c, l).matmul_params(c) + Attention::matmul_params(c)) + 12.0 * (double)c.seq_len * c.d_model;
}
}  // namespace

double matmul_params(const ModelConfig& c) {
  double n = (double)c.vocab_size * c.d_model;
  for (int l = 0; l < c.n_layers; l++) n += mlp_for(c, l).matmul_params(c) + Attention::matmul_params(c);
  return n;
}

double stored_matmul_params(const ModelConfig& c) {
  double n = (double)c.vocab_size * c.d_model;
  for (int l = 0; l < c.n_layers; l++) n += mlp_for(c, l).stored_params(c) + Attention::matmul_params(c);
  return n;
}

double train_flops_per_token(const ModelConfig& c) {
  return 6.0 * matmul_params(c) + 12.0 * c.n_layers * (double)c.seq_len * c.d_model;
}

double expert_flops_share(const ModelConfig& c) {
  double experts = 0;
  for (int l = 0; l < c.n_layers; l++)
    if (c.moe.in_layer(l)) experts += 6.0 * 3.0 * c.moe.top_k * c.moe.expert_ffn * c.d_model;
  return experts / train_flops_per_token(c);
}

std::vector<double> stage_work(const ModelConfig& c, int pp) {
  std::vector<double> w(pp, 0.0);
  const int per_stage = c.n_layers / pp;
  for (int l = 0; l < c.n_layers; l++) w[std::min(l / std::max(per_stage, 1), pp - 1)] += layer_flops(c, l);
  w.back() += 6.0 * c.vocab_size * c.d_model;
  double mean = 0;
  for (double x : w) mean += x / pp;
  for (double& x : w) x /= mean;
  return w;
}

}  // namespace trainer
