#include "model/layer/mlp.h"

namespace trainer {

const Mlp& mlp_for(const ModelConfig& c) { return c.arch == Arch::Llama ? swiglu_mlp() : gelu_mlp(); }

}  // namespace trainer
