#pragma once
// All-to-all attention over a context-parallel group (parallel.cp_comm =
// "a2a", DeepSpeed's Ulysses, Megatron-Core's a2a): an all-to-all turns
// this rank's rows of every head (its two chunks of each sequence) into the
// whole sequence of heads / cp of the heads, in sequence order; the
// backend's attention runs on that as on one process; a second all-to-all
// brings each rank its rows of the output, now of every head. The backward
// moves q|k|v, the output and its gradient the same way, and dq|dk|dv back.
// Each rank sends (cp - 1) / cp of what it holds per exchange, whatever cp
// is (the ring: cp - 1 whole k|v blocks); it needs heads and kv heads
// divisible by cp (after tp's split). With GQA a rank's query heads take
// their own kv heads along.
#include <vector>

#include "parallel/context_attention.h"
#include "runtime/buffer.h"

namespace trainer {

class UlyssesAttention final : public ContextAttention {
 public:
  // s: this rank's share of the micro-batch, as RingAttention's; s.H and
  // s.KVH must divide by the group's size.
  UlyssesAttention(Backend& be, DataComm& comm, const AttentionShape& s, DType compute);
  // stats: the attention's own over its head-sharded whole sequence, [B,
  // H / cp, seq_len, kAttentionStats] (as many floats as the ring's).
  void forward(Ref out, float* stats, CRef qkv) override;
  void backward(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats) override;

 private:
  // A token row's columns that go to head group j: piece k of this rank's
  // row starts at local + j * width and lands at `full` in the row of the
  // head-sharded layout.
  struct Piece {
    size_t local, full, width;
  };
  struct Split {
    size_t local_row, full_row;  // elements per token row: here (all heads), there (heads / cp)
    std::vector<Piece> pieces;
  };
  // One copy_rows between a staging buffer (send_ or recv_) and a layer-side
  // buffer: rows of cols elements at each one's offset and pitch.
  struct RowBlock {
    size_t staged, staged_pitch, layer, layer_pitch, rows, cols;
  };
  // The token side (this rank's rows of all heads) and the head side (the
  // whole sequence of its head group) of an exchange.
  std::vector<RowBlock> token_side(const Split& split) const;
  std::vector<RowBlock> head_side(const Split& split) const;
  // Sequence-sharded rows of all heads -> the whole sequence of this rank's
  // head group (to_heads), or back. Collective.
  void shuffle(Ref out, CRef in, const Split& split, bool to_heads);
  // send_'s block j to rank j, rank i's into recv_'s block i (blocks of
  // `block` elements): DataComm::start_alltoall.
  void exchange(size_t block);

  Backend& be_;
  DataComm& comm_;
  AttentionShape s_, full_;  // here; the head group's whole sequence
  int cp_, chunk_;  // chunk_: tokens per chunk (s.T / 2)
  Split qkv_split_, out_split_;
  Buffer send_, recv_;           // cp blocks each (compute type)
  Buffer qkv_, out_, dout_, dqkv_;  // the head group's whole sequence
};

}  // namespace trainer
