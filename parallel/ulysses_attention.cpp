#include "parallel/ulysses_attention.h"

#include <chrono>
#include <stdexcept>

#include "parallel/context_chunks.h"

namespace trainer {

namespace {
constexpr int kA2aTag = 2;  // apart from the ring's tags (0, 1)
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
}  // namespace

UlyssesAttention::UlyssesAttention(Backend& be, DataComm& comm, const AttentionShape& s, DType compute)
    : be_(be), comm_(comm), s_(s), cp_(comm.size()), me_(comm.rank()), chunk_(s.T / 2) {
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
  std::vector<DataComm::Handle> handles;
  for (int j = 0; j < cp_; j++) {
    if (j == me_) continue;
    handles.push_back(comm_.irecv(recv_.ref() + j * block, block, j, kA2aTag));
    handles.push_back(comm_.isend(send_.ref() + j * block, block, j, kA2aTag));
  }
  be_.copy(recv_.ref() + me_ * block, send_.ref() + me_ * block, block);
  const auto t0 = Clock::now();
  for (DataComm::Handle h : handles) comm_.wait(h);
  times_.exposed_ms += ms_since(t0);
}

// Block j of send_ holds this rank's token rows of head group j; after the
// exchange block i of recv_ holds rank i's rows of this rank's group, its
// two chunks one after the other, which go to their places in each sequence.
void UlyssesAttention::to_heads(Ref full, CRef local, const Split& split) {
  const size_t rows = (size_t)s_.B * s_.T, block = rows * split.full_row;
  for (int j = 0; j < cp_; j++)
    for (const Piece& p : split.pieces)
      be_.copy_rows(send_.ref() + j * block + p.full, split.full_row, local + p.local + j * p.width, split.local_row,
                    rows, p.width);
  exchange(block);
  const size_t chunk = (size_t)chunk_ * split.full_row;  // one chunk of one sequence
  for (int i = 0; i < cp_; i++)
    for (int half = 0; half < 2; half++)
      be_.copy_rows(full + cp_chunk(cp_, i, half) * chunk, (size_t)full_.T * split.full_row,
                    recv_.ref() + i * block + half * chunk, (size_t)s_.T * split.full_row, s_.B, chunk);
}

void UlyssesAttention::to_sequence(Ref local, CRef full, const Split& split) {
  const size_t rows = (size_t)s_.B * s_.T, block = rows * split.full_row;
  const size_t chunk = (size_t)chunk_ * split.full_row;
  for (int i = 0; i < cp_; i++)
    for (int half = 0; half < 2; half++)
      be_.copy_rows(send_.ref() + i * block + half * chunk, (size_t)s_.T * split.full_row,
                    full + cp_chunk(cp_, i, half) * chunk, (size_t)full_.T * split.full_row, s_.B, chunk);
  exchange(block);
  for (int j = 0; j < cp_; j++)
    for (const Piece& p : split.pieces)
      be_.copy_rows(local + p.local + j * p.width, split.local_row, recv_.ref() + j * block + p.full, split.full_row,
                    rows, p.width);
}

void UlyssesAttention::forward(Ref out, float* stats, CRef qkv) {
  to_heads(qkv_.ref(), qkv, qkv_split_);
  const auto t0 = Clock::now();
  be_.attention_fwd(out_.ref(), stats, qkv_.ref(), full_);
  times_.compute_ms += ms_since(t0);
  to_sequence(out, out_.ref(), out_split_);
}

// The forward's head-sharded q|k|v and output are not kept (the layer keeps
// its own rows of them): exchanged again, with the output's gradient.
void UlyssesAttention::backward(Ref dqkv, CRef dout, CRef qkv, CRef out, const float* stats) {
  to_heads(qkv_.ref(), qkv, qkv_split_);
  to_heads(out_.ref(), out, out_split_);
  to_heads(dout_.ref(), dout, out_split_);
  const auto t0 = Clock::now();
  be_.attention_bwd(dqkv_.ref(), dout_.ref(), qkv_.ref(), out_.ref(), stats, full_);
  times_.compute_ms += ms_since(t0);
  to_sequence(dqkv, dqkv_.ref(), qkv_split_);
}

}  // namespace trainer
