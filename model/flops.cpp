#include "model/flops.h"

#include "model/layer/attention.h"
#include "model/layer/mlp.h"

namespace trainer {

double matmul_params(const ModelConfig& c) {
  const double mlp = mlp_for(c).matmul_params(c), attn = Attention::matmul_params(c);
  return c.n_layers * (mlp + attn) + (double)c.vocab_size * c.d_model;
}

double stored_matmul_params(const ModelConfig& c) {
  const double mlp = mlp_for(c).stored_params(c), attn = Attention::matmul_params(c);
  return c.n_layers * (mlp + attn) + (double)c.vocab_size * c.d_model;
}

double train_flops_per_token(const ModelConfig& c) {
  return 6.0 * matmul_params(c) + 12.0 * c.n_layers * (double)c.seq_len * c.d_model;
}

std::vector<double> stage_work(const ModelConfig& c, int pp) {
  ModelConfig body = c;
  body.vocab_size = 0;
  const double layers = train_flops_per_token(body), head = 6.0 * c.vocab_size * c.d_model;
  std::vector<double> w(pp, layers / pp);
  w.back() += head;
  const double mean = (layers + head) / pp;
  for (double& x : w) x /= mean;
  return w;
}

}  // namespace trainer
