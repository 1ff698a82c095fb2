#pragma once
// A layer's MLP block (the shape of Megatron-Core's layer spec): each kind
// declares its parameters (names, shapes, how tp shards them), what it saves
// for backward, its backward scratch and its FLOPs, and runs its forward and
// backward. The registry, the model's buffers, the memory plan and the FLOP
// counts read these declarations; the layer (model/transformer.cpp) calls
// forward and backward and knows no kind. A kind lives in its own file
// (gelu_mlp.cpp, swiglu_mlp.cpp) plus its ops; mlp_for picks it.
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer/layer_ops.h"
#include "model/layer/layer_shape.h"
#include "model/layer/saved_acts.h"
#include "model/param_registry.h"

namespace trainer {

// One of an MLP's tensors, declared once: our name (after "layers.N.mlp."),
// Hugging Face's (after the layer's prefix, "transformer.h.N." or
// "model.layers.N."), its global shape, how tp shards it. Matrices decay;
// replicated tensors (a bias after the row-parallel product) see 1/tp of
// the tokens under sequence parallelism, so their gradients are partial.
struct MlpParam {
  enum Shape { FfByD, Ff, DByFf, D };  // [d_ff, d], [d_ff], [d, d_ff], [d]
  const char* name;
  const char* hf;
  Shape shape;
  Sharding sharding;
  bool hf_transposed;  // GPT-2's Conv1D keeps [in, out]
  std::vector<int> global_shape(const ModelConfig& c) const;
  bool matrix() const { return shape == FfByD || shape == DByFf; }
};

// One layer's MLP on this rank: its parameters' offsets, saved activations
// and scratch, each in the order its kind declared them.
struct MlpTensors {
  const std::vector<size_t>& params;
  const std::vector<Ref>& saved;
  const std::vector<Ref>& scratch;
};

class Mlp {
 public:
  virtual ~Mlp() = default;
  // Its tensors, in the order the registry lays them out.
  virtual const std::vector<MlpParam>& params() const = 0;
  // Adds them to the registry under `prefix` ("layers.3.mlp."); returns
  // their offsets.
  std::vector<size_t> add_params(ParamRegistry& r, const std::string& prefix, const ModelConfig& c) const;
  // Weights one layer's products read per token, its matrices' elements
  // (model/flops.h counts 6 FLOPs for each in training).
  double matmul_params(const ModelConfig& c) const;
  virtual SavedActs saved(const LayerShape& s) const = 0;
  // Backward temporaries, in elements of the compute type: by default the
  // gradient of each saved activation.
  virtual std::vector<size_t> scratch(const LayerShape& s) const;
  // Forward product FLOPs of one micro-batch that full recomputation reruns
  // (all but the output product, which the backward does not need).
  virtual double rerun_flops(const LayerShape& s) const = 0;
  // in: the normed input, all M rows; out = resid + MLP(in), this rank's rows.
  // Upto::DroppedOnly rebuilds only what selective recomputation dropped.
  virtual void forward(const LayerOps& ops, const MlpTensors& t, CRef in, Ref out, CRef resid, Upto upto) const = 0;
  // g_out: the gradient of out (this rank's rows); accumulates the
  // parameters' gradients and leaves in g_in [M, d] the gradient of `in`, a
  // partial sum over tp.
  virtual void backward(const LayerOps& ops, const MlpTensors& t, CRef g_out, CRef in, Ref g_in) const = 0;
};

// GPT-2's: a GELU (tanh form) between two products with biases. Llama's:
// SwiGLU, silu(gate) * up, without biases.
const Mlp& gelu_mlp();
const Mlp& swiglu_mlp();
// The model's MLP.
const Mlp& mlp_for(const ModelConfig& c);

}  // namespace trainer
