#pragma once
// One rank's optimizer step: the micro-batches through this rank's pipeline
// stage (engine/pipeline_executor.h), the gradient reductions
// (engine/grad_reduce.h), global-norm clipping, AdamW; evaluation; and its
// checkpoints (engine/checkpoint_staging.h). Takes the typed Recipe and
// communicators; the step loop (engine/step_loop.h) owns policy, logging and
// files, so tests can drive steps directly.
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "engine/checkpoint_staging.h"
#include "engine/pipeline_executor.h"
#include "engine/replica_reduction.h"
#include "engine/unit_weights.h"
#include "recipe/recipe.h"
#include "ckpt/checkpoint.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "engine/grad_reduce.h"
#include "model/adamw.h"
#include "model/text_ends.h"
#include "model/transformer.h"
#include "parallel/comm_stats.h"
#include "parallel/communicator.h"
#include "runtime/buffer.h"
#include "parallel/pipeline_schedule.h"

namespace trainer {

class ProcessGrid;

struct StepStats {
  long step = 0;          // 1-based: optimizer steps completed
  double loss = 0;        // mean over the global batch
  double lr = 0;
  double grad_norm = 0;   // before clipping
  double step_ms = 0;
  // Times this rank's host waited for its backend in the step (Backend::
  // host_syncs; every rank makes the same calls): the read of loss and
  // gradient norm, and the end-of-step synchronisation that makes step_ms
  // true (2). Not reduced over ranks, so it costs no collective.
  uint64_t host_syncs = 0;
  double data_wait_ms = 0;  // slowest rank's wait on its loader this step
  // The data-parallel gradient reduction: how long the step waited for it
  // (exposed: after the backward; ZeRO-2 and 3: and inside it, for a
  // gradient window still in flight; ZeRO-1 and 2: and on the updated
  // weights' all-gather; ZeRO-3: on the gathers the prefetch did not hide),
  // and from its first start to its last completion (span; with overlap,
  // mostly hidden behind the backward).
  double dp_exposed_ms = 0, dp_span_ms = 0;
  // Context parallelism (cut_sequences: the step ran it, a ring or an
  // all-to-all): this rank's time waiting on its transfers (what the
  // attention did not hide), and the attention-work imbalance across its
  // group: the slowest rank's time in the attention over the group's mean,
  // minus 1.
  bool cut_sequences = false;
  double cp_exposed_ms = 0, cp_imbalance = 0;
  // Mixture-of-Experts (moe: the model has routed experts): the router's
  // balancing and z-losses, summed over the layers, each a mean over the
  // global batch's tokens (model/layer/moe_routing.h); not in `loss`.
  bool moe = false;
  double moe_aux_loss = 0, moe_z_loss = 0;
  // Each expert's selections (token-expert pairs routed to it) over the
  // global batch, [n_layers x experts], layer by layer (a dense layer's 0),
  // and per layer the share of its pairs dropped past an expert's capacity
  // and its router's balancing and z-losses (their sums are the above).
  std::vector<double> moe_selections, moe_dropped, moe_layer_aux, moe_layer_z;
  // The rows this rank's experts computed (its own; under expert
  // parallelism what the routing sent them), for the straggler judgment.
  double moe_expert_rows = 0;
  // This rank's communication in the step, per dimension's group (kGridDims
  // order; dp's is the weight replicas').
  CommCounters comm[kGridDimCount];
  const CommCounters& comm_of(const char* dim) const { return comm[known_grid_dim(dim)]; }
  // Expert parallelism's: the tokens' exchanges (ep) and the experts'
  // gradient sums over the replicas holding the same ones (edp).
  CommCounters comm_ep;
  // Pipeline, this rank's stage: time computing, time waiting on pipeline
  // receives (the bubble), and the most micro-batches holding activations.
  // span: wall time of the stage's whole schedule (its last action's end).
  double compute_ms = 0, pipe_wait_ms = 0, span_ms = 0;
  int peak_in_flight = 0;
  // The same for every stage, in stage order (gathered over the pipeline).
  std::vector<double> stage_compute_ms, stage_wait_ms, stage_span_ms, stage_peak_in_flight;
  MemoryStats memory;  // this rank's backend allocations: current, and peaks since start
  // The loss or gradient norm was NaN/Inf: the update was not applied (the
  // step and its batch count as done; the caller decides what follows).
  bool nonfinite = false;
  // The loss was above the limit set_loss_limit() gave: not applied either.
  bool spike = false;
  // Time in this rank's communication calls (all groups), waits included.
  double comm_ms() const;
};

// One group's communicators: backend buffers and host values.
struct GroupComms {
  DataComm* data = nullptr;
  ControlComm* control = nullptr;
};
// The groups a rank trains in, one per grid dimension (kGridDims order;
// null, or of one rank: that kind of parallelism is off). dp's is the ranks
// holding the same weights (kWeightReplicaDims: weight gradients are summed
// and ZeRO-1 shards over it; ranked as the grid, the other replica
// dimensions fastest).
struct ParallelGroups {
  GroupComms dims[kGridDimCount];
  DataComm* embed = nullptr;  // first + last stage, for tied embeddings
  // Expert parallelism (GridShape::ep): the replicas holding a layer's
  // experts between them (null where ep = 1), and those holding the same
  // experts (the replicas where ep = 1).
  GroupComms ep, edp;
  GroupComms& operator[](const char* dim) { return dims[known_grid_dim(dim)]; }
};
ParallelGroups groups_of(ProcessGrid& grid);

class RankStep {
 public:
  // val: no sources for none. The datasets must outlive the step.
  RankStep(Backend& be, ParallelGroups groups, const Recipe& r, Blend train, Blend val = Blend());
  ~RankStep();
  // What this rank holds (engine/layout.h): its micro-batch and chunks.
  const RankLayout& layout() const { return layout_; }
  StepStats step();
  // The first half of step(): gradients of the next global batch, reduced
  // over TP (sequence-parallel partials), tied copies and DP, not yet clipped
  // or applied; the losses stay on the device until read_sums().
  void compute_gradients(StepStats* stats = nullptr);
  // Validation loss: per source, over training.eval_batches micro-batches
  // per rank each (the same samples every time), and their weighted mean.
  struct Evaluation {
    double overall = -1;
    std::vector<std::pair<std::string, double>> sources;  // named sources only
    size_t windows = 0;                                    // distinct windows read, all sources
    // Sources with fewer windows than an evaluation reads (it wraps and
    // counts some twice): (source, windows it holds, windows read).
    std::vector<std::tuple<std::string, size_t, size_t>> short_sources;
  };
  Evaluation evaluate();
  double evaluate(const TokenDataset& data);  // collective, as evaluate()
  // This rank's model chunks (one without interleaving).
  std::vector<std::unique_ptr<Transformer>>& chunks() { return chunks_; }
  Transformer& model() { return *chunks_.front(); }
  std::vector<std::unique_ptr<AdamW>>& optimizers() { return opts_; }  // one per chunk
  UnitShards* unit_shards() { return reduction_->unit_shards(); }       // ZeRO-2/3's gradient shards, else null
  UnitWeights* unit_weights() { return unit_weights_.get(); }           // ZeRO-3's weight shards, else null
  double grad_sumsq();  // whole model, every tensor once
  // Whether this rank's weights (every chunk's fp32 master parameters) are
  // all finite. One pass over them: asked only after a non-finite step.
  bool weights_finite();
  long steps_done() const { return step_; }
  // Stream position where the next unconsumed step starts (Loader::cursor,
  // also on pipeline stages that read no data and so build no loader).
  uint64_t data_cursor() const { return cursor_; }

  // Checkpoints (ckpt/checkpoint.h): collective over `world`. save writes this
  // rank's pieces of the weights and AdamW state (first DP rank of each
  // (pp, tp) position) and returns the committed directory; load restores
  // them, the step, the AdamW step count and the data cursor from a
  // checkpoint of any layout.
  std::string save_checkpoint(const std::string& dir, int keep, ControlComm& world,
                              const std::string& recipe_text = "",
                              const std::function<void(const char*)>& at_point = {});
  void load_checkpoint(const std::string& step_dir);
  // Weights from a Hugging Face model directory (checkpoint.init_from), in
  // this layout; the optimizer, step and data cursor stay at their start.
  // data_ends: the special ids of the training data's tokenizer, which the
  // model's must equal (unknown: not checked).
  void init_from_hf(const std::string& dir, const TextEnds& data_ends);
  // Bytes this rank's file of a checkpoint takes (0 on ranks that write none).
  size_t checkpoint_file_bytes();
  // on_nan = "rollback": weights, AdamW state and step from step_dir, but the
  // data continues where it is now, so the batches since that checkpoint
  // (the offending one included) are skipped. Returns how many batches.
  long rollback(const std::string& step_dir);
  // Asynchronous save: copies this rank's state to host memory and writes it
  // in the background (a previous pending save is finished first); poll once
  // per step (collective) to commit: returns the step directory when it did.
  void start_async_save(const std::string& dir, int keep, ControlComm& world,
                        const std::string& recipe_text);
  std::string poll_async_save(ControlComm& world, bool wait) { return staging_->poll_async(world, wait); }
  bool async_save_pending() const { return staging_->async_pending(); }

  // Fault injection (recipe/fault.h): a NaN enters this rank's gradients in the
  // next step, before the data-parallel reduction; each step computes
  // extra_ms longer.
  void poison_next_step() { poison_ = true; }
  // ... or one of this rank's weights becomes NaN now (an overflowed update).
  void poison_weights();
  void set_extra_compute_ms(double ms) { extra_ms_ = ms; }
  // ... and the next step's batches arrive corrupted (every target id moved
  // by half the vocabulary, as garbled data would be): a real loss spike.
  void corrupt_next_step() { corrupt_ = true; }

  // A step whose loss exceeds `limit` is a spike: its update is not applied
  // (StepStats::spike). Infinity: no limit. The caller derives it from the
  // recent losses (training.spike_factor).
  void set_loss_limit(double limit) { loss_limit_ = limit; }

 private:
  void make_loader(uint64_t start_position);
  Buffer& master_weights(size_t c);  // chunk c's fp32 weights: whole, or ZeRO-3's slices
  TrainingState training_state() const;  // what a checkpoint records now
  const Batch& next_batch(std::map<int, Batch>& batches, int mb, double* wait_ms);
  void record_stage_times(StepStats& s);
  void record_cp_times(StepStats& s);
  void record_moe_losses(StepStats& s);
  StepSums read_sums();                 // after compute_gradients: one backend read
  // This rank's place among the data-parallel ranks (those reading different
  // sequences: ranks that cut sequences read the same ones) and their count.
  LoaderConfig data_parallel_reads() const;
  double mean_loss(double loss_sum);    // over the global batch, on every rank

  Backend& be_;
  // Data communicators, counted per step. replicas_: the weight replicas
  // (ParallelGroups' dp), ranked as in the grid.
  CountingDataComm replicas_;
  std::unique_ptr<CountingDataComm> tp_, pp_, cp_;
  ControlComm* replicas_control_;
  ControlComm* pp_control_;  // null without pipeline parallelism
  ControlComm* tp_control_;
  ControlComm* cp_control_;  // null without context parallelism
  // Expert parallelism (null without): the ranks holding the experts
  // between them, and those holding the same ones (where their gradients are
  // summed).
  std::unique_ptr<CountingDataComm> ep_, edp_counted_;
  ControlComm* ep_control_;
  DataComm* edp_;  // edp_counted_ where it has peers under expert parallelism
  DataComm* embed_;
  // parallel.zero_stage where there are weight replicas to shard over, else 0.
  int zero_ = 0;
  std::unique_ptr<ReplicaReduction> reduction_;  // the gradients over the weight replicas (engine/replica_reduction.h)
  std::unique_ptr<UnitWeights> unit_weights_;  // ZeRO-3 (engine/unit_weights.h)
  std::vector<Backend::SumSpan> sum_spans_;  // the losses and gradients read_sums() adds up
  const Recipe& r_;
  Blend train_, val_;
  PipelineSpec pipe_;
  RankLayout layout_;  // this rank's (engine/layout.h): what its chunks are built from
  int stage_ = 0;
  Chunks chunks_;
  std::vector<std::unique_ptr<AdamW>> opts_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<CheckpointStaging> staging_;
  std::unique_ptr<Loader> loader_;  // null on stages with neither embedding nor head
  uint64_t cursor_ = 0;
  long step_ = 0;
  bool poison_ = false, corrupt_ = false;
  double extra_ms_ = 0;
  double loss_limit_ = std::numeric_limits<double>::infinity();
};

}  // namespace trainer
