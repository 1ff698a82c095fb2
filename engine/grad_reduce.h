#pragma once
// The gradient reductions between a step's last backward and the optimizer,
// in the order they must happen, and the global gradient norm.
#include <memory>
#include <vector>

#include "model/adamw.h"
#include "model/transformer.h"
#include "parallel/communicator.h"

namespace trainer {

using Chunks = std::vector<std::unique_ptr<Transformer>>;

// Within one model replica: under sequence parallelism the partial gradients
// of replicated tensors are summed over TP; a tied embedding's two copies
// (first and last pipeline stage, group `embed`) each get the sum of both
// gradients, so they stay identical. embed null or of size 1: no copies.
// Both in fp32 (they are small, or, for the tied embedding, one tensor).
void reduce_replica_grads(Chunks& chunks, DataComm* embed, bool tied_embeddings);

// Over data-parallel replicas the gradients are SUMmed, because each
// token's loss gradient was pre-scaled by 1 / (tokens in the global batch):
// in buckets that overlap the backward (engine/grad_buckets.h), or, under
// ZeRO-1, reduce-scattered (below).

// What the host needs of a finished backward, in one backend read (the step's
// one wait for the device before the optimizer): the squared global gradient
// norm, each chunk's tensors once over TP, summed over the pipeline (pp
// null: one stage) and, where the gradients are sharded over the weight
// replicas, over dp (null: not sharded; same value on every rank); and this
// rank's sum of the step's per-token losses (the head chunk's, 0 elsewhere),
// reduced over nothing. `spans` as Transformer::step_sum_spans groups them:
// 0 sharded over TP, 1 replicated, 2 losses, 3 experts split over the ep
// ranks (summed over ep: null, none).
struct StepSums {
  double grad_sumsq = 0, loss_sum = 0;
};
StepSums read_step_sums(Backend& be, const std::vector<Backend::SumSpan>& spans, ControlComm* dp, ControlComm* tp,
                        ControlComm* pp, ControlComm* ep = nullptr);
// The spans without sharding: every chunk's whole gradient and its losses.
std::vector<Backend::SumSpan> step_spans(Chunks& chunks);

// ZeRO-1's regions of a chunk's flat buffer, each split over its own group
// (model/adamw.h's zero_ranges: equal blocks, one per rank, and a tail of
// fewer elements than ranks every rank keeps): all of it over the weight
// replicas (dp), or under expert parallelism the tensors before the
// experts over them and the experts over the replicas holding the same
// ones (edp; null where ep = 1).
struct Zero1Region {
  size_t lo, hi;
  DataComm* comm;
};
using Zero1Regions = std::vector<std::vector<Zero1Region>>;  // per chunk
std::vector<Zero1Region> zero1_regions(Transformer& m, DataComm& dp, DataComm* edp);
// What this rank's AdamW updates of them: each region's block and tail.
std::vector<OwnedRange> zero1_owned(const std::vector<Zero1Region>& regions);
// Under ZeRO-1: this rank's blocks of each chunk (a tail counted by its saver).
std::vector<Backend::SumSpan> zero1_step_spans(Chunks& chunks, const Zero1Regions& regions);

// ZeRO-1 (parallel.zero_stage = 1), region by region:
// - the gradients are reduce-scattered: each rank gets the sum of its block
//   (in its place in grads()) and of the tail; the rest of grads() is left
//   unreduced. A bf16 run sends them as bf16 through wire_buf, as
//   GradBuckets does. `block_buf`: one block of the compute
//   type, the collective's destination.
void reduce_scatter_grads(Backend& be, Chunks& chunks, const Zero1Regions& regions, Buffer* wire_buf,
                          Buffer& block_buf);
// - the global norm from the blocks (zero1_step_spans);
// - after each rank updated its block (and the tail), the weights the
//   products read (the bf16 copy in a bf16 run, else the fp32 weights) are
//   all-gathered. A bf16 run's fp32 master weights stay current only in the
//   rank's own block and the tail (checkpoint staging gathers them).
void allgather_weights(Backend& be, Chunks& chunks, const Zero1Regions& regions, Buffer& block_buf);

}  // namespace trainer
