#pragma once
// GPT-2 initialisation: normal(0, 0.02) for matrices and embeddings, output
// projections of attention and MLP scaled by 1/sqrt(2*n_layers), biases zero,
// norm weights one. Each tensor draws from its own stream seeded by (seed,
// name), so a tensor's values do not depend on which others exist or on how
// the model is split across ranks.
#include <cstdint>
#include <vector>

#include "model/param_registry.h"

namespace trainer {

// Fills host memory (registry.total() floats).
void init_params(const ModelParams& mp, const ModelConfig& cfg, uint64_t seed, float* host);

}  // namespace trainer
