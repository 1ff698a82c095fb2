#pragma once
// What a layer declares besides its blocks (model/layer/attention.h,
// model/layer/mlp.h declare theirs): what it saves for its backward and the
// scratch its backward uses. The model carves its buffers from these
// declarations; the memory plan sums them.
#include <vector>

#include "model/config.h"
#include "model/layer/hf_param.h"
#include "model/layer/layer_shape.h"
#include "model/layer/saved_acts.h"

namespace trainer {

// The layer's input; the first norm's output (attention's input) and
// statistics; the residual stream between attention and the MLP; the
// second norm's output (the MLP's input) and statistics. Norm outputs are
// all M rows (gathered under sequence parallelism), the residual stream
// this rank's R.
enum LayerSaved { kResidIn, kNorm1, kMean1, kRstd1, kResidMid, kNorm2, kMean2, kRstd2 };
SavedActs layer_saved(const LayerShape& s);

// A chunk's backward scratch besides its blocks', in elements of the
// compute type: the residual stream's gradient (this rank's rows; what a
// chunk passes back), a norm's input gradient.
enum LayerScratch { kGResid, kGNorm };
std::vector<size_t> layer_scratch(const LayerShape& s);

// A layer's tensors under the model type's Hugging Face names, as its blocks
// declare them, in the order GPT-2's export writes them: the first norm,
// attention, the second norm, the MLP. The layer names its two norms (GPT-2's
// ln_1 and ln_2, Llama's input_layernorm and post_attention_layernorm).
std::vector<HfParam> layer_hf_params(const ModelConfig& c);

}  // namespace trainer
