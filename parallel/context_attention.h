#pragma once
// Attention over a context-parallel group: every rank holds its two chunks
// of each sequence (parallel/context_chunks.h) and attends to the whole
// causal past. Two ways, chosen by parallel.cp_comm:
//   ring (parallel/ring_attention.h): the k|v blocks travel the group's ring
//     while the block in hand is attended to; any head count.
//   a2a (parallel/ulysses_attention.h, DeepSpeed's Ulysses): an all-to-all
//     turns the sequence shards into head shards, each rank attends to the
//     whole sequence for heads / cp of the heads, and one back; heads and kv
//     heads must divide by cp x tp.
#include <memory>

#include "parallel/communicator.h"
#include "parallel/context_chunks.h"  // CpComm
#include "runtime/backend.h"

namespace trainer {

// Where the attention's time went, summed over its forwards and backwards
// since the last reset (host clock: on the CPU backend the attention's
// compute itself).
struct CpTimes {
  double compute_ms = 0;  // the attention work this rank does
  double exposed_ms = 0;  // waiting on the group's transfers
  CpTimes& operator+=(const CpTimes& o) {
    compute_ms += o.compute_ms, exposed_ms += o.exposed_ms;
    return *this;
  }
};

class ContextAttention {
 public:
  virtual ~ContextAttention() = default;
  // As Backend::attention_fwd / attention_bwd for the whole sequence, on
  // this rank's rows (s.T = seq_len / cp of each sequence, its two chunks one
  // after the other): out [B*T, H*hd] and stats (B * H * T * kAttentionStats
  // floats, laid out as the kind needs: only its backward reads them).
  // Collective over the group.
  virtual void forward(Ref out, float* stats, CRef qkv) = 0;
  virtual void backward(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats) = 0;
  const CpTimes& times() const { return times_; }
  void reset_times() { times_ = {}; }

 protected:
  CpTimes times_;
};

// overlap: the ring's (the a2a waits for its exchanges in any case).
std::unique_ptr<ContextAttention> make_context_attention(CpComm kind, Backend& be, DataComm& comm,
                                                         const AttentionShape& s, DType compute, bool overlap);

}  // namespace trainer
