#pragma once
// A layer's attention block: the q|k|v projection (column-parallel, whole
// heads; with biases where the model has them), RoPE at the tokens' places
// in their whole sequences where the model rotates, causal attention (here,
// or over the context-parallel group: a ring or an all-to-all,
// parallel/context_attention.h), and the row-parallel output projection. As
// the MLP (model/layer/mlp.h), it declares its tensors, what it saves, its
// scratch and its FLOPs, which the model's buffers, the registry, the
// memory plan and the FLOP counts read.
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/layer/hf_param.h"
#include "model/layer/layer_ops.h"
#include "model/layer/layer_shape.h"
#include "model/layer/saved_acts.h"
#include "model/param_registry.h"

namespace trainer {

class ContextAttention;
struct CudaMemory;
struct CpTimes;

class Attention {
 public:
  // What it saves (in this order): q|k|v [M, Q], per-row statistics (never
  // the T x T probabilities), its output [M, H hd]; its scratch: the
  // output's and q|k|v's gradients.
  enum Saved { kQkv, kStats, kOut };
  enum Scratch { kGOut, kGQkv };
  static SavedActs saved(const LayerShape& s);
  static std::vector<size_t> scratch(const LayerShape& s);
  // Its tensors under `prefix` ("layers.3."), into lp's attention offsets.
  static void add_params(ParamRegistry& r, const std::string& prefix, const ModelConfig& c, LayerParams& lp);
  // Those tensors under the model type's Hugging Face names (GPT-2's c_attn
  // holds q, k and v as row blocks, Conv1D-transposed).
  static std::vector<HfParam> hf_params(const ModelConfig& c);
  // Weights its products read per token; forward product FLOPs of one
  // micro-batch (all rerun by full recomputation): q|k|v, the scores and
  // values against every key of the sequence, the output projection.
  static double matmul_params(const ModelConfig& c);
  static double rerun_flops(const LayerShape& s);
  // The backend's attention shape of this rank's heads and tokens.
  static AttentionShape attention_shape(const LayerShape& s);
  // Its memory beyond the saved activations and scratch, in bytes (e: the
  // compute type's size): the context-parallel attention's buffers of one
  // chunk, its collective buffers (comm) and its working blocks; the rows
  // of its backward's per-thread fp32 blocks; what only the CUDA backend
  // holds for it (cuDNN's workspace, its rows, the ring's pair block), and
  // the words saying how that workspace grows.
  struct Buffers {
    double comm = 0, temporaries = 0;
  };
  static Buffers context_buffers(const LayerShape& s, const RankLayout& l, double e);
  static double backward_rows(const LayerShape& s, const RankLayout& l);
  static void plan_cuda(const LayerShape& s, const RankLayout& l, CudaMemory& m);
  static std::string workspace_words(const RankLayout& l);

  // positions: each of this rank's T tokens' place in its whole sequence;
  // group: where the layout cuts sequences (l.cp > 1), the ranks sharing
  // them (l.cp of them, checked; the attention runs over it as
  // l.cp_comm says), else null.
  Attention(Backend& be, const ModelConfig& c, const LayerShape& s, const RankLayout& l, DataComm* group,
            std::vector<int> positions);
  ~Attention();
  // in: the normed input, all M rows; out = resid + attention(in), this
  // rank's rows; saved: as Saved.
  void forward(const LayerOps& o, const LayerParams& lp, const std::vector<Ref>& saved, CRef in, Ref out, CRef resid);
  // g_out: the gradient of out (this rank's rows); leaves in g_in [M, d] the
  // gradient of `in`, a partial sum over tp.
  void backward(const LayerOps& o, const LayerParams& lp, const std::vector<Ref>& saved,
                const std::vector<Ref>& scratch, CRef g_out, CRef in, Ref g_in);
  // The cp group's times since the last reset (null without cp).
  const CpTimes* cp_times() const;
  void reset_cp_times();

 private:
  void rope(const LayerOps& o, Ref qkv, bool inverse) const;
  bool bias_, rotate_;
  RopeFreqs freqs_;
  AttentionShape shape_;
  std::vector<int> positions_;
  std::unique_ptr<ContextAttention> cp_;
};

}  // namespace trainer
