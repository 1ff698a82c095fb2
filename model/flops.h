#pragma once
// Model FLOPs for MFU: 6 * (parameters used in matrix products) per token,
// plus attention's score and value products, 12 * n_layers * seq_len * d_model
// per token (forward + backward, full T x T as PaLM and Megatron count it).
// Embedding lookups are not FLOPs; a tied LM head counts as a product.
#include <vector>

#include "model/config.h"

namespace trainer {

double matmul_params(const ModelConfig& c);
// The weights the matrices store (a Mixture-of-Experts model's every expert;
// matmul_params counts the ones a token uses).
double stored_matmul_params(const ModelConfig& c);
double train_flops_per_token(const ModelConfig& c);
// The share of train_flops_per_token the routed experts' products take (0:
// dense): what a rank whose experts got more tokens spends more on.
double expert_flops_share(const ModelConfig& c);
// Each of pp pipeline stages' share of a step's products, relative to the
// mean stage (1.0 each without pipelining): equal layers per stage (each at
// its own cost: a Mixture-of-Experts model's dense first layers differ),
// and the LM head on the last, which is slower by design.
std::vector<double> stage_work(const ModelConfig& c, int pp);

}  // namespace trainer
