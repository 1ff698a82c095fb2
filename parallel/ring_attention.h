#pragma once
// Ring attention over a context-parallel group (issue 48): every rank holds
// its two chunks of each sequence (parallel/context_chunks.h) and attends to
// the whole causal past by passing the k|v rows of its chunks around the
// group. In cp steps each rank sees every rank's block once: the one in hand
// is attended to (the backend's pair ops, chunk pair by chunk pair, merged
// into a running output by the per-row max and sum of exponentials) while
// the next one is already on its way. The backward goes round the same ring:
// the k|v blocks again, and with each a dK|dV accumulator that every rank
// adds its share to, arriving home complete after the last step. With GQA
// only the kv heads travel.
#include <initializer_list>

#include "parallel/communicator.h"
#include "parallel/context_attention.h"
#include "runtime/backend.h"
#include "runtime/buffer.h"

namespace trainer {

class RingAttention final : public ContextAttention {
 public:
  // s: this rank's share of the micro-batch (s.T = seq_len / cp rows per
  // sequence, its two chunks one after the other); the group's size is cp.
  // overlap: attend to the block in hand while the next one travels; false:
  // wait for each transfer first (the same result; its exposed time is the
  // ring's whole communication time).
  RingAttention(Backend& be, DataComm& comm, const AttentionShape& s, DType compute, bool overlap = true);
  // As Backend::attention_fwd / attention_bwd for the whole sequence, on
  // this rank's rows: out [B*T, H*hd] and stats [B, H, T, kAttentionStats].
  // Collective over the group.
  void forward(Ref out, float* stats, CRef qkv) override;
  void backward(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats) override;

 private:
  void wait(DataComm::Handle h);  // timed as exposed
  void wait_all(std::initializer_list<DataComm::Handle*> handles);  // those in flight; each becomes none
  void progress(std::initializer_list<DataComm::Handle> handles);
  AttentionPair pair(int q_half, int k_half, bool causal) const;

  Backend& be_;
  DataComm& comm_;
  AttentionShape s_;
  bool overlap_;
  int chunk_;          // tokens per chunk: s.T / 2
  size_t kv_elems_;    // one block of k|v rows
  Buffer kv_[2];       // the block in hand and the one arriving (compute type)
  Buffer acc_;         // fp32 [B*T, H*hd]: the running output, then dq
  Buffer dkv_[2], dkv_in_;  // fp32 dK|dV: this step's sum (two: one may still be on its way), the partial arriving
  Buffer stats_start_;  // the running statistics' start (max -inf, sum 0)
};

}  // namespace trainer
