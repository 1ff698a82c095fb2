#include "engine/replica_reduction.h"

#include <algorithm>

#include "runtime/elapsed.h"
#include "runtime/units.h"

namespace trainer {

std::vector<OwnedRange> ReplicaReduction::owned_ranges(int zero, Transformer& m, DataComm& dp, DataComm* edp) {
  if (zero == 1) return zero1_owned(zero1_regions(m, dp, edp));
  if (zero >= 2) return unit_ranges(m.units(), dp.rank(), dp.size());
  return {};
}

ReplicaReduction::ReplicaReduction(Backend& be, Chunks& chunks, DataComm& dp, DataComm* embed, DataComm& edp,
                                   const Recipe& r, int zero, PipelineExecutor& executor)
    : be_(be), chunks_(chunks), dp_(dp), embed_(embed), edp_(edp), experts_apart_(r.parallel.grid.ep > 1),
      tied_(r.model.tie_embeddings), zero_(zero) {
  if (experts_apart_ && zero > 1) throw std::invalid_argument("ZeRO-2/3 with expert parallelism");
  size_t total = 0, largest_block = 0;
  for (auto& m : chunks) {
    total += m->num_params();
    if (zero != 1) continue;
    regions_.push_back(zero1_regions(*m, dp, experts_apart_ ? &edp : nullptr));
    for (const Zero1Region& g : regions_.back())  // (a group of one moves nothing)
      if (g.comm->size() > 1) largest_block = std::max(largest_block, (g.hi - g.lo) / (size_t)g.comm->size());
  }
  const DType compute = chunks.front()->compute_type();
  // Traffic in the compute type (bf16 runs send bf16).
  if (compute != DType::F32 && dp.size() > 1 && zero < 2) wire_ = be.alloc(total, compute, Mem::Comm);
  if (zero == 1) block_ = be.alloc(largest_block, compute, Mem::Comm);
  if (zero >= 2) {
    unit_shards_ = std::make_unique<UnitShards>(be, chunks, dp, embed, tied_);
    unit_shards_->lend();
  }
  if (zero == 0 && dp.size() > 1) {
    // Gradients that change after the backward wait for finish(): a tied
    // embedding's copies (summed over the embedding group first), under
    // sequence parallelism the partial gradients summed over TP, and the
    // experts' (laid out after the layers whose backward declares what
    // follows them final).
    const bool sp = r.parallel.sequence_parallel && r.parallel.grid.tp > 1, apart = experts_apart_;
    const bool tied = tied_ && embed && embed->size() > 1;
    buckets_ = std::make_unique<GradBuckets>(
        be, chunks, dp, &wire_, (size_t)(r.parallel.dp_bucket_mb * kMiB),
        [sp, tied, apart](const ParamInfo& p) {
          return (sp && p.seq_partial_grad) || (tied && p.name == "embed.tok") || (p.expert && !apart);
        },
        [apart](const ParamInfo& p) { return apart && p.expert; });
    if (r.parallel.dp_overlap)
      executor.set_final_backward_hook([this](int c, size_t from) {
        if (overlap_now_) buckets_->grads_final(c, from);
      });
  }
}

ReplicaReduction::~ReplicaReduction() = default;

void ReplicaReduction::begin_step(bool overlap) {
  overlap_now_ = overlap;
  if (unit_shards_) unit_shards_->begin_step();
  if (buckets_) buckets_->begin_step();
  exposed_ms_ = span_ms_ = 0;
}

void ReplicaReduction::finish(const std::function<void(Ref)>& poison) {
  if (unit_shards_) {  // (their windows reduced within the model replica as they left)
    unit_shards_->finish();
    exposed_ms_ = unit_shards_->exposed_ms(), span_ms_ = unit_shards_->span_ms();
    if (poison) poison(unit_shards_->shard(0).ref());
    return;
  }
  reduce_replica_grads(chunks_, embed_, tied_);
  if (poison) poison(chunks_.front()->grads().ref());
  if (zero_ == 1) {
    const auto t0 = Clock::now();
    reduce_scatter_grads(be_, chunks_, regions_, &wire_, block_);
    exposed_ms_ = span_ms_ = ms_since(t0);
  } else if (buckets_) {
    buckets_->finish();
    exposed_ms_ = buckets_->exposed_ms(), span_ms_ = buckets_->span_ms();
  }
  if (experts_apart_ && zero_ == 0 && edp_.size() > 1) {  // (fp32 on the wire: one call per chunk)
    const auto t0 = Clock::now();
    for (auto& m : chunks_) {
      size_t lo = m->num_params();
      for (const ParamInfo& p : m->registry().all())
        if (p.expert) lo = std::min(lo, p.offset);
      if (lo < m->num_params()) edp_.allreduce_sum(m->grads().ref(lo), m->num_params() - lo);
    }
    const double ms = ms_since(t0);
    exposed_ms_ += ms, span_ms_ += ms;
  }
}

const Buffer& ReplicaReduction::grads(size_t c) const {
  return unit_shards_ ? unit_shards_->shard(c) : chunks_[c]->grads();
}

AdamW::Packed ReplicaReduction::packed(bool weights_sharded) const {
  using P = AdamW::Packed;
  return weights_sharded ? P::Both : unit_shards_ ? P::Grads : P::None;
}

std::vector<Backend::SumSpan> ReplicaReduction::sum_spans() {
  // (Under ZeRO-2/3 the chunks hold no gradients: step_spans gives their losses.)
  std::vector<Backend::SumSpan> spans =
      zero_ == 1 ? zero1_step_spans(chunks_, regions_) : step_spans(chunks_);
  if (unit_shards_) {
    const std::vector<Backend::SumSpan> shards = unit_shards_->grad_spans();
    spans.insert(spans.end(), shards.begin(), shards.end());
  }
  return spans;
}

double ReplicaReduction::gather_weights() {
  const auto t0 = Clock::now();
  if (zero_ == 1) allgather_weights(be_, chunks_, regions_, block_);
  if (zero_ == 2) unit_shards_->allgather_weights();
  return zero_ == 1 || zero_ == 2 ? ms_since(t0) : 0.0;
}

}  // namespace trainer
