#include "parallel/ring_attention.h"

#include <cmath>
#include <utility>
#include <vector>

#include "parallel/context_chunks.h"
#include "runtime/elapsed.h"

namespace trainer {

namespace {
constexpr int kKvTag = 0, kDkvTag = 1;
constexpr DataComm::Handle kNone = -1;  // no operation in flight (handles start at 0)
}

void RingAttention::wait(DataComm::Handle h) {
  const auto t0 = Clock::now();
  comm_.wait(h);
  times_.exposed_ms += ms_between(t0, Clock::now());
}

// A look between the pair ops lets the next block travel while the
// attention goes on: MPI moves a transfer on only inside its calls, and
// NCCL's communicator issues the held sends and receives at the first test
// (parallel/nccl_communicator.h).
void RingAttention::progress(std::initializer_list<DataComm::Handle> handles) {
  for (DataComm::Handle h : handles)
    if (h != kNone) comm_.test(h);
}

void RingAttention::wait_all(std::initializer_list<DataComm::Handle*> handles) {
  for (DataComm::Handle* h : handles)
    if (*h != kNone) wait(std::exchange(*h, kNone));
}

RingAttention::RingAttention(Backend& be, DataComm& comm, const AttentionShape& s, DType compute, bool overlap)
    : be_(be), comm_(comm), s_(s), overlap_(overlap), chunk_(s.T / 2) {
  const size_t rows = (size_t)s.B * s.T, kv_row = 2 * (size_t)s.KVH * s.hd;
  kv_elems_ = rows * kv_row;
  for (Buffer& b : kv_) b = be.alloc(kv_elems_, compute, Mem::Comm);
  for (Buffer& b : dkv_) b = be.alloc(kv_elems_, DType::F32, Mem::Comm);
  dkv_in_ = be.alloc(kv_elems_, DType::F32, Mem::Comm);
  acc_ = be.alloc(rows * s.H * s.hd, DType::F32, Mem::Temporaries);
  const size_t n_stats = (size_t)s.B * s.H * s.T * Backend::kAttentionStats;
  std::vector<float> start(n_stats, 0.f);
  for (size_t i = 0; i < n_stats; i += Backend::kAttentionStats) start[i] = -INFINITY;
  stats_start_ = be.alloc(n_stats, DType::F32, Mem::Temporaries);
  be.from_host(stats_start_.ref(), start.data(), n_stats);
}

// A pair of this rank's query half and a travelling block's key half: the
// block's rows are k|v only (attention_kv_pack's layout).
AttentionPair RingAttention::pair(int q_half, int k_half, bool causal) const {
  const int kv_heads = s_.KVH * s_.hd;
  return {q_half * chunk_, k_half * chunk_, chunk_, causal, s_.T, 2 * kv_heads, 0, kv_heads};
}

// Step i holds the block of rank me - i and passes it on to me + 1 while it
// attends to it; after cp steps every block has been seen.
void RingAttention::forward(Ref out, float* stats, CRef qkv) {
  const int cp = comm_.size(), me = comm_.rank(), next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  be_.attention_kv_pack(kv_[0].ref(), qkv, s_);
  be_.zero(acc_.ref(), acc_.count());
  be_.copy(stats, stats_start_.ref(), stats_start_.count());
  for (int i = 0; i < cp; i++) {
    Buffer &here = kv_[i % 2], &coming = kv_[(i + 1) % 2];
    DataComm::Handle send = kNone, recv = kNone;
    if (i + 1 < cp) {
      send = comm_.isend(here.ref(), kv_elems_, next, kKvTag);
      recv = comm_.irecv(coming.ref(), kv_elems_, prev, kKvTag);
    }
    if (!overlap_) wait_all({&send, &recv});
    const auto t0 = Clock::now();
    for (const ChunkPair& p : ring_pairs(cp, me, (me + cp - i) % cp)) {
      be_.attention_pair_fwd(acc_.ref().f32(), stats, qkv, here.ref(), s_, pair(p.q_half, p.k_half, p.causal));
      progress({send, recv});
    }
    times_.compute_ms += ms_between(t0, Clock::now());
    wait_all({&send, &recv});
  }
  be_.attention_pair_out(out, acc_.ref().f32(), stats, s_);
}

// The blocks go round again, each followed by its dK|dV: a rank adds its
// share (computed into a buffer of its own, so the partial sum from the
// previous rank can arrive meanwhile) and sends the sum on; the last step's
// sum goes to the block's own rank, complete.
void RingAttention::backward(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats) {
  const int cp = comm_.size(), me = comm_.rank(), next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  be_.attention_kv_pack(kv_[0].ref(), qkv, s_);
  be_.zero(acc_.ref(), acc_.count());  // dq
  DataComm::Handle dkv_recv = kNone, dkv_send[2] = {kNone, kNone};
  for (int i = 0; i < cp; i++) {
    Buffer &here = kv_[i % 2], &coming = kv_[(i + 1) % 2];
    Buffer& sum = dkv_[i % 2];
    DataComm::Handle send = kNone, recv = kNone;
    if (i + 1 < cp) {
      send = comm_.isend(here.ref(), kv_elems_, next, kKvTag);
      recv = comm_.irecv(coming.ref(), kv_elems_, prev, kKvTag);
    }
    if (!overlap_) wait_all({&send, &recv, &dkv_recv});
    if (dkv_send[i % 2] != kNone) wait(std::exchange(dkv_send[i % 2], kNone));  // sent two steps ago: free again
    const auto t0 = Clock::now();
    be_.zero(sum.ref(), kv_elems_);
    for (const ChunkPair& p : ring_pairs(cp, me, (me + cp - i) % cp)) {
      be_.attention_pair_bwd(acc_.ref().f32(), sum.ref().f32(), dout, qkv, here.ref(), out, stats, s_,
                             pair(p.q_half, p.k_half, p.causal));
      progress({send, recv, dkv_recv});
    }
    times_.compute_ms += ms_between(t0, Clock::now());
    if (i > 0) {  // the ranks before this one have added their shares to this block's
      if (dkv_recv != kNone) wait(std::exchange(dkv_recv, kNone));
      be_.add(sum.ref(), sum.ref(), dkv_in_.ref(), kv_elems_);
    }
    dkv_send[i % 2] = comm_.isend(sum.ref(), kv_elems_, next, kDkvTag);
    dkv_recv = comm_.irecv(dkv_in_.ref(), kv_elems_, prev, kDkvTag);  // the next block's partial, or at the end our own's sum
    wait_all({&send, &recv});
  }
  wait_all({&dkv_recv, &dkv_send[0], &dkv_send[1]});
  be_.attention_pair_grads(dqkv, acc_.ref().f32(), dkv_in_.ref().f32(), s_);
}

}  // namespace trainer
