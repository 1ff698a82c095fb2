#pragma once
// Decoder-only transformer ("gpt2" or "llama") with explicit forward and
// backward passes, llm.c style: parameters, gradients and activations live in
// contiguous buffers owned here, and every op is a Backend call. A layer is
// two norms and two blocks (model/layer/: attention, an MLP kind) that
// declare what they hold and run their own forward and backward.
//
// Tensor parallelism (Megatron-style) over a TP communicator: attention heads
// and MLP hidden units are split (column-parallel in, row-parallel out), the
// embedding and LM head by vocabulary, and the loss is a vocab-parallel cross
// entropy, so no rank holds [tokens x vocab] logits. Without sequence
// parallelism each row-parallel output is all-reduced and the residual stream
// is replicated. With it, norms and residual adds run on this rank's 1/tp of
// the token rows: an all-gather feeds each column-parallel product and a
// reduce-scatter follows each row-parallel one.
//
// Context parallelism (parallel/context_attention.h): each sequence is cut over
// the ranks of a group, and an instance holds its share of the tokens of each
// of its sequences (two chunks, parallel/context_chunks.h); everything but
// attention is token-local, attention runs over the group (a ring, or an
// all-to-all to head shards: parallel.cp_comm), and
// positions (learned or RoPE) are the tokens' places in the whole sequence.
// The forward still takes whole [B, T] sequences and keeps its chunks.
//
// Pipeline parallelism: an instance may hold one chunk of the model (a layer
// range, with or without the embedding and the head) and keep activations for
// several micro-batches in flight, one "slot" each.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/layer/attention.h"
#include "model/layer/layer_ops.h"
#include "model/layer/mlp.h"
#include "model/layer/norm.h"
#include "model/param_registry.h"
#include "model/param_units.h"
#include "model/rank_layout.h"
#include "model/recompute.h"
#include "parallel/communicator.h"
#include "runtime/backend.h"

namespace trainer {

// How many ranks share a sequence is the layout's (GridShape::sequence_share);
// this is only the group those ranks talk over (null: each rank holds whole
// sequences).
struct ContextParallel {
  DataComm* comm = nullptr;
  ControlComm* control = nullptr;  // host sums over the group (a Mixture-of-Experts router's counts)
};
// Expert parallelism (GridShape::ep): the ranks holding a Mixture-of-
// Experts layer's experts between them (null: this rank holds them all).
struct ExpertParallel {
  DataComm* comm = nullptr;
  ControlComm* control = nullptr;
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
};

class Transformer {
 public:
  // The chunk `chunk` of a rank laid out as `layout` (model/rank_layout.h,
  // the struct its memory is planned from): activations sized for
  // layout.micro_batch sequences per forward/backward, chunk.slots times
  // (micro-batches whose backward is still to come); layout.compute the
  // element type of activations, their gradients, tensor- and
  // pipeline-parallel messages and the weights the products read (a bf16
  // copy of the fp32 master weights, refreshed by sync_compute_weights());
  // sequence parallelism over tp as the layout says. Parameters, gradients,
  // statistics, logits and losses stay fp32.
  Transformer(Backend& be, const ModelConfig& cfg, const RankLayout& layout, const ChunkLayout& chunk,
              TensorParallel tp = {}, RecomputeConfig recompute = {}, ContextParallel context = {},
              ExpertParallel experts = {});
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ModelParams& layout() const { return mp_; }
  const ParamRegistry& registry() const { return mp_.reg; }
  size_t num_params() const { return mp_.reg.total(); }  // this rank's
  // The fp32 master weights and gradients (registry offsets, this rank's
  // pieces). Under ZeRO-2 (RankLayout::grads_sharded) there is no gradient
  // buffer: the backward writes each unit's gradients into a window lent
  // to it (lend_grad_windows).
  Buffer& params() { return params_; }
  Buffer& grads() { return grads_; }
  const ParamUnits& units() const { return units_; }
  // ZeRO-2: open(u) lends unit u's gradient window (its size() elements,
  // accumulated into, so zeroed by the lender when it should start from
  // nothing) before the backward writes it; close(u) gives it back when the
  // backward is done with it. A backward opens the head's unit (and a tied
  // embedding's, which the head writes into, around it), each layer's while
  // it passes them, and the embedding's last.
  struct GradWindows {
    std::function<float*(int unit)> open;
    std::function<void(int unit)> close;
  };
  void lend_grad_windows(GradWindows w) { windows_ = std::move(w); }
  // ZeRO-3 (RankLayout::weights_sharded): no weights either; open(u, pass)
  // lends unit u's whole weights (the compute type, gathered) for a forward
  // (pass 0) or a backward (1), close(u, pass) says the pass is done with
  // them. A forward opens the embedding's unit, each layer's and the
  // head's in turn (the embedding's stays open through the head's where
  // the head reads a tied embedding); a backward the tied embedding's and
  // the head's, then the layers' in reverse (an untied embedding's
  // backward reads no weights). params() is empty: the lender keeps the
  // master weights.
  struct WeightWindows {
    std::function<CRef(int unit, int pass)> open;
    std::function<void(int unit, int pass)> close;
  };
  void lend_weight_windows(WeightWindows w) { weight_windows_ = std::move(w); }
  DType compute_type() const { return compute_; }
  // After the master weights change (initialisation, an optimizer step, a
  // checkpoint load): the bf16 copy the products read follows them. No-op
  // in fp32.
  void sync_compute_weights();
  // The compute copy for an optimizer step to refresh as it goes (null in fp32).
  Buffer* compute_copy() { return compute_ == DType::F32 ? nullptr : &cparams_; }
  int micro_batch() const { return B_; }
  int tokens() const { return M_; }  // token rows per micro-batch: B x this rank's share of a sequence
  int slots() const { return (int)slots_.size(); }  // micro-batches it can hold in flight

  const ChunkSpec& chunk() const { return mp_.chunk; }
  // Rows of the activations a chunk passes on: [rows, d_model] (this rank's
  // share under sequence parallelism).
  // Elements of the compute type.
  size_t boundary_elems() const { return (size_t)R_ * cfg_.d_model; }

  // Runs the forward pass on [B, T] inputs/targets (host int32 arrays) and
  // returns the mean loss. With grad_scale != 0 the loss gradient (scaled by
  // grad_scale per token) is prepared for backward().
  double forward(const int32_t* inputs, const int32_t* targets, float grad_scale) {
    return forward(0, inputs, targets, CRef(), grad_scale);
  }
  // Accumulates parameter gradients into grads() for the last forward().
  void backward() { backward(0, CRef()); }

  // Pipeline form. forward: a chunk with the embedding reads `inputs`, others
  // read act_in [boundary_elems()]; a chunk with the head reads `targets` and
  // returns the mean loss (others 0; 0 too while keep_losses_on_device
  // holds a training forward's losses on the device). Activations stay in `slot` until
  // backward(slot, grad_out), where a chunk without the head takes the
  // gradient of its output. output(slot) is what forward passes on;
  // input_grad() what backward passes back (chunks without the embedding).
  double forward(int slot, const int32_t* inputs, const int32_t* targets, CRef act_in, float grad_scale);
  void backward(int slot, CRef grad_out);
  CRef output(int slot) const { return slots_[slot].out; }
  CRef input_grad() const { return g_resid_; }
  // Context parallelism: the attention's times since the last reset (null without it).
  const CpTimes* cp_times() const;
  void reset_cp_times();
  // Under sequence parallelism, sums the partial gradients of replicated
  // tensors over the TP group; call once per step, after the last backward().
  // Under ZeRO-2, those of unit u in its window, whenever the lender has
  // that window's gradients complete.
  void reduce_sequence_parallel_grads();
  void reduce_sequence_parallel_grads(int unit, float* window);
  // Called inside backward() with an offset X whenever every gradient at
  // registry offsets >= X is final for that backward: after the head, after
  // each layer (the registry lays out embedding, layers, final norm, head),
  // and X = 0 at the end. How the data-parallel reduction starts buckets
  // while the backward goes on. Empty: none.
  void set_grad_hook(std::function<void(size_t)> hook) { grad_hook_ = std::move(hook); }
  // Squared L2 norm of this chunk's gradient, each tensor counted once over
  // TP (sharded pieces summed, replicated ones taken once); a tied copy of the
  // embedding is left out (its original counts it). One backend read.
  double grad_sumsq();
  // The spans behind it over the part [lo, hi) of the gradient buffer
  // (ZeRO-1: this rank's block): group 0 sharded tensors (to be summed over
  // TP), group 1 replicated ones. Training reads them with the loss in one
  // call (engine/grad_reduce.h, read_step_sums).
  std::vector<Backend::SumSpan> grad_spans(size_t lo, size_t hi) const;

  // Training keeps the loss on the device (the head chunk): each training
  // forward adds its per-token losses into a buffer that the step reads once,
  // at its end, with the gradient norm, instead of the host waiting for
  // every micro-batch's loss; forward() then returns 0. Forward passes
  // without a gradient (evaluation) still return their mean loss.
  void keep_losses_on_device(bool on) { losses_on_device_ = on; }
  void reset_step_losses();
  // A Mixture-of-Experts model's balancing and z-losses (model/layer/
  // moe_routing.h) summed over this chunk's rows since reset_step_losses()
  // (before the division by the batch's tokens), and its experts'
  // selections; per layer of the chunk.
  const std::vector<RouterStepSums>& moe_step_sums() const { return moe_sums_; }
  // Auxiliary-loss-free balancing after a step: each of the chunk's routers'
  // selection bias (in the fp32 master weights) moves by `rate` toward its
  // experts' mean load. selections: every layer's experts' over the step
  // (StepStats::moe_selections, [n_layers x experts]).
  void nudge_router_bias(const std::vector<double>& selections, double rate);
  // What a step reads in one sumsq_groups call (groups 0, 1: grad_spans over
  // [lo, hi); group 2 on the head chunk: the step's summed per-token losses,
  // a plain sum).
  std::vector<Backend::SumSpan> step_sum_spans(size_t lo, size_t hi) const;

 private:
  // One layer's saved activations, as declared (model/layer/layer_decl.h
  // LayerSaved, Attention::Saved, the MLP's own order): the compute type, or
  // fp32 where declared.
  struct LayerActs {
    std::vector<Ref> own, attn, mlp;
    MoeRoute route;  // a Mixture-of-Experts MLP's routing of the micro-batch (host)
  };
  // One micro-batch's saved activations.
  struct Slot {
    std::vector<LayerActs> layers;
    Ref out;    // the chunk's output rows (the head's input)
    Ref normf;  // head only, as the rest
    float *meanf, *rstdf, *logits, *losses, *ce_max, *ce_stats;
    Buffer inputs, targets;  // int32 token ids
    // Their host staging (pinned on a GPU): the batch is copied in there and
    // on to the device without the host waiting; `staged` marks the copies,
    // which must be complete before the staging is refilled.
    Buffer inputs_host, targets_host;
    Backend::Event staged;
    float grad_scale = 0;  // its forward's (0: no backward follows)
  };
  void stage_tokens(Slot& sl, Buffer& dev, Buffer& host, const int32_t* tokens);
  void layer_fwd(LayerActs& a, const LayerParams& lp, Ref out, Upto upto);
  void norm_to_full(Ref full, float* mean, float* rstd, CRef x, const NormParams& p);
  void embed_fwd(Slot& sl, const int32_t* inputs, Ref x0);
  double head_fwd(Slot& sl, const int32_t* targets, float grad_scale);
  void head_bwd(Slot& sl);
  void layer_bwd(LayerActs& a, const LayerParams& lp, int l);
  const Mlp& mlp_of(const LayerParams& lp) const { return *mlp_kinds_[kind_of_[&lp - mp_.layers.data()]].mlp; }
  MlpTensors mlp_tensors(LayerActs& a, const LayerParams& lp);
  void allocate_activations(int slots);
  CRef W(size_t offset) const;  // wherever its unit's weights are now
  float* G(size_t offset);      // wherever its unit's gradients are now
  // ZeRO-3: borrows unit u's weights for a pass and points the layers' ops at them; gives them back.
  void weights_open(int unit, int pass);
  void weights_close(int unit, int pass);
  // ZeRO-2: borrows unit u's window and points the layers' ops at it; gives it back.
  void grads_open(int unit);
  void grads_close(int unit);

  Backend& be_;
  ModelConfig cfg_;
  TensorParallel tp_;
  ModelParams mp_;
  const Norm& norm_;
  // The MLP kinds of the chunk's layers (a Mixture-of-Experts model's first
  // layers may be dense): each one's declared activations, the workspace
  // its recomputing layers rebuild into, its backward scratch.
  struct MlpKind {
    const Mlp* mlp;
    SavedActs saved;
    std::vector<Ref> work, scratch;
    std::vector<float*> scratch32;
  };
  std::vector<MlpKind> mlp_kinds_;
  std::vector<int> kind_of_;  // each layer's
  DType compute_;
  int B_, T_, M_, R_;    // sequences, tokens of each here (its share), token rows, rows this rank keeps (M_/tp with SP)
  int row_offset_;       // first token row of this rank's share
  SequenceShare seq_;    // which tokens of each sequence are here
  std::vector<SequenceShare::Run> position_runs_;  // this rank's R_ rows by consecutive places
  std::unique_ptr<Attention> attn_;  // the layers' attention (over the ranks sharing each sequence, if any)
  int V_, vocab_offset_;  // this rank's vocabulary rows, the first one's id
  Buffer params_, grads_;  // fp32 (grads_ empty under ZeRO-2)
  ParamUnits units_;
  GradWindows windows_;
  std::vector<float*> open_;  // ZeRO-2: each unit's lent window while it is open, else null
  WeightWindows weight_windows_;
  std::vector<CRef> wopen_;   // ZeRO-3: each unit's lent weights while open
  Buffer cparams_;         // the compute copy (bf16 runs only)
  Buffer acts_, acts32_;   // saved activations, all slots: compute type, fp32
  Buffer scratch_;         // backward temporaries
  Buffer scratch32_;       // fp32 backward temporaries (a Mixture-of-Experts MLP's)
  Buffer comm_;            // collective buffers (tensor parallelism)
  LayerOps ops_;           // what the layers' blocks run with
  std::vector<Slot> slots_;
  RecomputeConfig rc_;
  std::vector<Backend::SumSpan> grad_spans_;
  std::function<void(size_t)> grad_hook_;  // grad_sumsq's tensors, built once
  LayerActs work_{};  // one layer's rebuilt norms and attention, shared by recomputing layers
  // backward scratch (model/layer/layer_decl.h LayerScratch; the blocks' own)
  Ref g_resid_, g_norm_;
  std::vector<Ref> attn_scratch_;
  RouterSpec router_;          // a Mixture-of-Experts MLP's router (model/layer/moe_routing.h)
  float loss_scale_ = 0;       // the backward's slot's grad_scale
  std::vector<RouterStepSums> moe_sums_;  // per layer: its router's over the step's backward
  std::vector<float> host_losses_;
  bool losses_on_device_ = false;
  Buffer step_losses_;  // head chunk: per-token losses summed over the step's micro-batches
};

}  // namespace trainer
