#pragma once
// A layer's MLP block (the shape of Megatron-Core's layer spec): each kind
// declares its parameters (names, shapes, how tp shards them), what it saves
// for backward, its backward scratch and its FLOPs, and runs its forward and
// backward. The registry, the model's buffers, the memory plan and the FLOP
// counts read these declarations; the layer (model/transformer.cpp) calls
// forward and backward and knows no kind. A kind lives in its own file
// (gelu_mlp.cpp, swiglu_mlp.cpp, moe_mlp.cpp) plus its ops; mlp_for picks it.
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer/layer_ops.h"
#include "model/layer/moe_routing.h"
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
  // [d_ff, d], [d_ff], [d, d_ff], [d]; a Mixture-of-Experts router's
  // [experts, d] and selection bias [experts], a routed expert's
  // [expert_ffn, d], [d, expert_ffn], the shared expert's
  // [shared_expert_ffn, d], [d, shared_expert_ffn].
  enum Shape { FfByD, Ff, DByFf, D, EByD, E, FeByD, DByFe, FsByD, DByFs };
  const char* name;
  const char* hf;
  Shape shape;
  Sharding sharding;
  bool hf_transposed;  // GPT-2's Conv1D keeps [in, out]
  std::vector<int> global_shape(const ModelConfig& c) const;
  bool matrix() const { return shape != Ff && shape != D && shape != E; }
};

// One layer's MLP on this rank: its parameters' offsets, saved activations
// and scratch, each in the order its kind declared them (a Mixture-of-
// Experts kind's: its expert tensors after its own, expert by expert). A
// Mixture-of-Experts kind also has its fp32 scratch, the host's record of
// the micro-batch's routing, the loss scale of the router's own losses (the
// cross entropy's per-token 1/N; 0: no backward) and where the backward
// sums them and the experts' selections.
struct MlpTensors {
  const std::vector<size_t>& params;
  const std::vector<Ref>& saved;
  const std::vector<Ref>& scratch;
  const std::vector<float*>* scratch32 = nullptr;
  const RouterSpec* router = nullptr;
  MoeRoute* route = nullptr;
  const float* master = nullptr;  // the fp32 master weights (registry offsets): a router's selection bias
  float loss_scale = 0;
  RouterStepSums* sums = nullptr;
};

class Mlp {
 public:
  virtual ~Mlp() = default;
  // Its tensors, in the order the registry lays them out.
  virtual const std::vector<MlpParam>& params() const = 0;
  // Adds them to the registry under `prefix` ("layers.3.mlp."); returns
  // their offsets.
  std::vector<size_t> add_params(ParamRegistry& r, const std::string& prefix, const ModelConfig& c) const;
  // Tensors each expert has (Mixture-of-Experts kinds; none for a dense
  // one), named "experts.E." + name by the global index E; build_params
  // lays this rank's (count from `first`) out after the chunk's other
  // tensors, so that they can be reduced apart.
  virtual const std::vector<MlpParam>& expert_params() const;
  std::vector<size_t> add_expert_params(ParamRegistry& r, const std::string& prefix, const ModelConfig& c, int first,
                                        int count) const;
  // Weights one layer's products read per token, its matrices' elements
  // (model/flops.h counts 6 FLOPs for each in training); with experts, the
  // active ones.
  virtual double matmul_params(const ModelConfig& c) const;
  // The weights one layer stores in its matrices (with experts: all of them).
  virtual double stored_params(const ModelConfig& c) const { return matmul_params(c); }
  virtual SavedActs saved(const LayerShape& s) const = 0;
  // Backward temporaries, in elements of the compute type: by default the
  // gradient of each saved activation.
  virtual std::vector<size_t> scratch(const LayerShape& s) const;
  // Backward temporaries in fp32.
  virtual std::vector<size_t> scratch32(const LayerShape&) const { return {}; }
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
// SwiGLU, silu(gate) * up, without biases. Mixture-of-Experts: routed
// SwiGLU experts (model/layer/moe_mlp.cpp), with a shared one or without,
// with a selection bias (auxiliary-loss-free balancing) or without.
const Mlp& gelu_mlp();
const Mlp& swiglu_mlp();
const Mlp& moe_mlp(bool shared_expert, bool bias);
// Layer l's MLP.
const Mlp& mlp_for(const ModelConfig& c, int l);

// Llama's SwiGLU MLP over all M rows, F hidden units on this rank: the dense
// kind's and a Mixture-of-Experts layer's shared expert's. Its fused
// [w_gate | w_up] and w_down (registry offsets), its saved gate|up and
// activation, their gradients' scratch.
struct SwiGluRefs {
  size_t w_gate_up, w_down;
  Ref gate_up, h, g_gate_up, g_h;
};
// out = resid + MLP(in) (Upto as Mlp::forward's).
void swiglu_forward(const LayerOps& o, int F, const SwiGluRefs& t, CRef in, Ref out, CRef resid, Upto upto);
// g_in (written, all M rows, a partial sum over tp) from g_out (this rank's rows).
void swiglu_backward(const LayerOps& o, int F, const SwiGluRefs& t, CRef g_out, CRef in, Ref g_in);

}  // namespace trainer
