#pragma once
// What a layer declares apart from its MLP (model/layer/mlp.h declares the
// MLP's): what it saves for its backward, the scratch its backward uses and
// the products full recomputation reruns. The model carves its buffers from
// these declarations; the memory plan and the FLOP counts sum them.
#include <vector>

#include "model/layer/layer_shape.h"
#include "model/layer/saved_acts.h"

namespace trainer {

// The layer's input; the first norm's output and statistics; attention's
// q|k|v, per-row statistics (never the T x T probabilities) and output; the
// residual stream between attention and the MLP; the second norm's output
// (the MLP's input) and statistics. Norm outputs are all M rows (gathered
// under sequence parallelism), the residual stream this rank's R.
enum LayerSaved { kResidIn, kNorm1, kMean1, kRstd1, kQkv, kAttStats, kAtt, kResidMid, kNorm2, kMean2, kRstd2 };
SavedActs layer_saved(const LayerShape& s);

// A chunk's backward scratch besides the MLP's, in elements of the compute
// type: the residual stream's gradient (this rank's rows; what a chunk
// passes back), a norm's input gradient, attention's output and q|k|v
// gradients.
enum LayerScratch { kGResid, kGNorm, kGAtt, kGQkv };
std::vector<size_t> layer_scratch(const LayerShape& s);

// Forward product FLOPs of one micro-batch that full recomputation reruns
// outside the MLP: q|k|v, attention's scores and values (against every key
// of the sequence), the output projection.
double layer_rerun_flops(const LayerShape& s);
// Weights the layer's products read per token outside the MLP: q|k|v and
// the output projection (model/flops.h).
double layer_matmul_params(const ModelConfig& c);

}  // namespace trainer
