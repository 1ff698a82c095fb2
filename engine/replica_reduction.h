#pragma once
// How a rank's gradients meet the other weight replicas' (ParallelGroups'
// dp: the dp x cp ranks holding the same weights) in a step, and what each
// then updates, by parallel.zero_stage, in one place:
//   0     all-reduced in buckets that start during the backward
//         (engine/grad_buckets.h); one replica: nothing to reduce
//   1     reduce-scattered after the backward, AdamW on the rank's block, the
//         updated weights all-gathered (engine/grad_reduce.h)
//   2, 3  each unit reduce-scattered into the rank's gradient shard as the
//         backward leaves it (engine/unit_shards.h); ZeRO-2 all-gathers the
//         updated weights, ZeRO-3 keeps only weight shards and gathers them
//         where they are used (engine/unit_weights.h, RankStep's)
// Within a model replica first: sequence-parallel partial gradients summed
// over TP, a tied embedding's two copies over the embedding group. Under
// expert parallelism (ZeRO-0), the experts' gradients are summed over the
// replicas holding the same experts (edp) after the backward instead.
#include <functional>
#include <memory>
#include <vector>

#include "engine/grad_buckets.h"
#include "engine/grad_reduce.h"
#include "engine/pipeline_executor.h"
#include "engine/unit_shards.h"
#include "model/adamw.h"
#include "recipe/recipe.h"

namespace trainer {

class ReplicaReduction {
 public:
  // zero: parallel.zero_stage where there are replicas to shard over, else
  // 0. The chunks' optimizers hold owned_ranges(); the executor calls the
  // buckets back from the backward (ZeRO-0, parallel.dp_overlap).
  // edp: the replicas holding the same experts (dp where ep = 1).
  ReplicaReduction(Backend& be, Chunks& chunks, DataComm& dp, DataComm* embed, DataComm& edp, const Recipe& r,
                   int zero, PipelineExecutor& executor);
  ~ReplicaReduction();
  // What chunk m's AdamW updates on this replica of dp (all: empty); edp:
  // the replicas holding the same experts under expert parallelism, else null.
  static std::vector<OwnedRange> owned_ranges(int zero, Transformer& m, DataComm& dp, DataComm* edp);

  // Before a step's schedule. overlap: buckets may start during the backward.
  void begin_step(bool overlap);
  // After the schedule: the gradients reduced over the replicas. poison
  // (fault injection, may be empty) gets where a NaN enters this rank's
  // gradients: before they leave, or under ZeRO-2/3 its reduced shard.
  void finish(const std::function<void(Ref)>& poison);
  // The step's wait on it (exposed) and its first start to last completion.
  double exposed_ms() const { return exposed_ms_; }
  double span_ms() const { return span_ms_; }

  // What chunk c's AdamW reads, and how it lies (weights_sharded: ZeRO-3's).
  const Buffer& grads(size_t c) const;
  AdamW::Packed packed(bool weights_sharded) const;
  // The losses and gradients the step's one read adds up (each element on
  // one replica where sharded), and whether they are: read_step_sums' dp.
  std::vector<Backend::SumSpan> sum_spans();
  bool sums_sharded() const { return zero_ > 0; }
  // After each replica updated its part: whole weights everywhere again
  // (ZeRO-1, 2). Returns the time it took: nothing hides it.
  double gather_weights();

  UnitShards* unit_shards() { return unit_shards_.get(); }  // ZeRO-2/3's gradient shards, else null

 private:
  Backend& be_;
  Chunks& chunks_;
  DataComm& dp_;
  DataComm* embed_;
  DataComm& edp_;
  bool experts_apart_;  // expert parallelism: the experts reduced over edp_ in finish()
  bool tied_;
  int zero_;
  bool overlap_now_ = false;
  Buffer wire_;   // the gradients in the compute type (bf16 runs; ZeRO-2/3 narrow a unit at a time)
  Buffer block_;  // ZeRO-1: one block of the compute type (the largest region's)
  Zero1Regions regions_;  // ZeRO-1: each chunk's regions and their groups
  std::unique_ptr<GradBuckets> buckets_;     // ZeRO-0 with replicas
  std::unique_ptr<UnitShards> unit_shards_;  // ZeRO-2, 3
  double exposed_ms_ = 0, span_ms_ = 0;
};

}  // namespace trainer
