#include "parallel/ulysses_attention.h"

#include <stdexcept>

#include "parallel/context_chunks.h"
#include "runtime/elapsed.h"

namespace trainer {

UlyssesAttention::UlyssesAttention(Backend& be, DataComm& comm, const AttentionShape& s, DType compute)
    : be_(be), comm_(comm), s_(s), cp_(comm.size()), chunk_(s.T / 2) {
  if (s.H % cp_ != 0 || s.KVH % cp_ != 0 || s.T % 2 != 0)
    throw std::invalid_argument("a2a attention needs heads and kv heads divisible by cp and two chunks per rank");
  const int hh = s.H / cp_, kvh = s.KVH / cp_;
  const size_t hd = s.hd, full_row = (size_t)(hh + 2 * kvh) * hd;
  full_ = {s.B, s.T * cp_, hh, kvh, s.hd, (int)full_row, 0};
  // q heads, then k, then v: group j's of each, packed the same way.
  qkv_split_ = {(size_t)s.row, full_row,
                {{0, 0, hh * hd}, {(size_t)s.H * hd, hh * hd, kvh * hd}, {(size_t)(s.H + s.KVH) * hd, (hh + kvh) * hd, kvh * hd}}};
  out_split_ = {(size_t)s.H * hd, hh * hd, {{0, 0, hh * hd}}};
  const size_t rows = (size_t)s.B * s.T;  // this rank's token rows
  send_ = be.alloc(cp_ * rows * full_row, compute, Mem::Comm);
  recv_ = be.alloc(cp_ * rows * full_row, compute, Mem::Comm);
  qkv_ = be.alloc(cp_ * rows * full_row, compute, Mem::Temporaries);
  dqkv_ = be.alloc(cp_ * rows * full_row, compute, Mem::Temporaries);
  out_ = be.alloc(cp_ * rows * hh * hd, compute, Mem::Temporaries);
  dout_ = be.alloc(cp_ * rows * hh * hd, compute, Mem::Temporaries);
}

void UlyssesAttention::exchange(size_t block) {
  const DataComm::Handle h = comm_.start_alltoall(send_.ref(), recv_.ref(), block);
  const auto t0 = Clock::now();
  comm_.wait(h);
  times_.exposed_ms += ms_since(t0);
}

// Block j of a staging buffer holds a rank's token rows of head group j
// (the token side: each row's pieces of group j), and block i, once
// exchanged, rank i's rows of one group, its two chunks one after the other,
// whose places are in each sequence of the whole (the head side).
std::vector<UlyssesAttention::RowBlock> UlyssesAttention::token_side(const Split& split) const {
  const size_t rows = (size_t)s_.B * s_.T, block = rows * split.full_row;
  std::vector<RowBlock> out;
  for (int j = 0; j < cp_; j++)
    for (const Piece& p : split.pieces)
      out.push_back({j * block + p.full, split.full_row, p.local + j * p.width, split.local_row, rows, p.width});
  return out;
}

std::vector<UlyssesAttention::RowBlock> UlyssesAttention::head_side(const Split& split) const {
  const size_t block = (size_t)s_.B * s_.T * split.full_row, chunk = (size_t)chunk_ * split.full_row;
  std::vector<RowBlock> out;
  for (int i = 0; i < cp_; i++)
    for (int half = 0; half < 2; half++)
      out.push_back({i * block + half * chunk, (size_t)s_.T * split.full_row, cp_chunk(cp_, i, half) * chunk,
                     (size_t)full_.T * split.full_row, (size_t)s_.B, chunk});
  return out;
}

// Packs `in` into send_ by one side's blocks, exchanges, unpacks recv_ into
// `out` by the other's: to_heads from the token side to the head side,
// else back.
void UlyssesAttention::shuffle(Ref out, CRef in, const Split& split, bool to_heads) {
  const std::vector<RowBlock> packed = to_heads ? token_side(split) : head_side(split);
  const std::vector<RowBlock> unpacked = to_heads ? head_side(split) : token_side(split);
  for (const RowBlock& b : packed)
    be_.copy_rows(send_.ref() + b.staged, b.staged_pitch, in + b.layer, b.layer_pitch, b.rows, b.cols);
  exchange((size_t)s_.B * s_.T * split.full_row);
  for (const RowBlock& b : unpacked)
    be_.copy_rows(out + b.layer, b.layer_pitch, recv_.ref() + b.staged, b.staged_pitch, b.rows, b.cols);
}

void UlyssesAttention::forward(Ref out, float* stats, CRef qkv) {
  shuffle(qkv_.ref(), qkv, qkv_split_, true);
  const auto t0 = Clock::now();
  be_.attention_fwd(out_.ref(), stats, qkv_.ref(), full_);
  times_.compute_ms += ms_since(t0);
  shuffle(out, out_.ref(), out_split_, false);
}

// The forward's head-sharded q|k|v and output are not kept (the layer keeps
// its own rows of them): exchanged again, with the output's gradient.
void UlyssesAttention::backward(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats) {
  shuffle(qkv_.ref(), qkv, qkv_split_, true);
  shuffle(out_.ref(), out, out_split_, true);
  shuffle(dout_.ref(), dout, out_split_, true);
  const auto t0 = Clock::now();
  be_.attention_bwd(dqkv_.ref(), dout_.ref(), qkv_.ref(), out_.ref(), stats, full_);
  times_.compute_ms += ms_since(t0);
  shuffle(dqkv, dqkv_.ref(), qkv_split_, false);
}

}  // namespace trainer
