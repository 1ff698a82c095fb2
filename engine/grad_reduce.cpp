#include "engine/grad_reduce.h"

#include <algorithm>

#include "model/adamw.h"

namespace trainer {

void reduce_replica_grads(Chunks& chunks, DataComm* embed, bool tied_embeddings) {
  for (auto& m : chunks) m->reduce_sequence_parallel_grads();
  if (!tied_embeddings || !embed || embed->size() <= 1) return;
  for (auto& m : chunks) {
    if (!(m->chunk().embed || m->chunk().head)) continue;
    const ParamInfo& p = m->registry().at("embed.tok");
    embed->allreduce_sum(m->grads().ref(p.offset), p.numel);
  }
}

void reduce_scatter_grads(Backend& be, Chunks& chunks, DataComm& dp, Buffer* wire_buf, Buffer& block_buf) {
  if (dp.size() == 1) return;
  be.wait_event(Backend::kCommStream, be.record_event(Backend::kComputeStream));
  const bool narrow = wire_buf && *wire_buf;
  const size_t D = (size_t)dp.size(), r = (size_t)dp.rank();
  size_t wire_off = 0;
  for (auto& m : chunks) {
    const size_t n = m->grads().count(), block = n / D, body = block * D;
    const Ref grads = m->grads().ref(), travels = narrow ? wire_buf->ref(wire_off) : grads;
    if (narrow) be.convert(travels, grads, n);
    std::vector<DataComm::Handle> started;
    if (block) started.push_back(dp.start_reduce_scatter(travels, block_buf.ref(), block));
    if (body < n) started.push_back(dp.start_allreduce(travels + body, n - body, ReduceOp::Sum));
    for (DataComm::Handle h : started) dp.wait(h);
    if (block) be.convert(grads + r * block, block_buf.ref(), block);  // a copy in fp32
    if (narrow && body < n) be.convert(grads + body, travels + body, n - body);
    wire_off += n;
  }
}

std::vector<Backend::SumSpan> step_spans(Chunks& chunks) {
  std::vector<Backend::SumSpan> spans;
  for (auto& m : chunks) {
    const std::vector<Backend::SumSpan> more = m->step_sum_spans(0, m->num_params());
    spans.insert(spans.end(), more.begin(), more.end());
  }
  return spans;
}

std::vector<Backend::SumSpan> zero1_step_spans(Chunks& chunks, int dp_rank, int dp_size) {
  std::vector<Backend::SumSpan> spans;
  const auto add = [&](const std::vector<Backend::SumSpan>& more) { spans.insert(spans.end(), more.begin(), more.end()); };
  for (auto& m : chunks) {
    const size_t n = m->num_params(), block = n / (size_t)dp_size, body = block * (size_t)dp_size;
    add(m->step_sum_spans(block * (size_t)dp_rank, block * (size_t)(dp_rank + 1)));
    if (dp_rank == 0) add(m->grad_spans(body, n));
  }
  return spans;
}

StepSums read_step_sums(Backend& be, const std::vector<Backend::SumSpan>& spans, ControlComm* dp, ControlComm* tp,
                        ControlComm* pp, ControlComm* ep) {
  double sums[4] = {0, 0, 0, 0};  // sharded grads, replicated grads, losses, experts' grads (ep > 1)
  be.sumsq_groups(spans, sums, 4);
  if (dp) dp->allreduce_sum(sums, 2);
  if (tp) tp->allreduce_sum(&sums[0], 1);
  if (ep) ep->allreduce_sum(&sums[3], 1);
  StepSums out;
  out.grad_sumsq = sums[0] + sums[1] + sums[3];
  if (pp) pp->allreduce_sum(&out.grad_sumsq, 1);
  out.loss_sum = sums[2];
  return out;
}

void allgather_weights(Backend& be, Chunks& chunks, DataComm& dp, Buffer& block_buf) {
  if (dp.size() == 1) return;
  be.wait_event(Backend::kCommStream, be.record_event(Backend::kComputeStream));
  const size_t D = (size_t)dp.size(), r = (size_t)dp.rank();
  for (auto& m : chunks) {
    Buffer& w = m->compute_copy() ? *m->compute_copy() : m->params();
    const size_t block = w.count() / D;
    if (!block) continue;
    be.copy(block_buf.ref(), w.ref(r * block), block);  // MPI may not gather from inside its destination
    dp.wait(dp.start_allgather(block_buf.ref(), w.ref(), block));
  }
}

}  // namespace trainer
