#include "parallel/context_chunks.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace trainer {

const char* cp_comm_name(CpComm c) { return c == CpComm::A2a ? "a2a" : "ring"; }

int cp_chunk(int cp, int rank, int half) { return half == 0 ? rank : 2 * cp - 1 - rank; }

int cp_position(int cp, int rank, int seq_len, int t) {
  const int chunk = seq_len / (2 * cp);
  return cp_chunk(cp, rank, t / chunk) * chunk + t % chunk;
}

SequenceShare::SequenceShare(int cp, int rank, int seq_len) : cp_(cp), seq_len_(seq_len) {
  if (cp > 1 && seq_len % (2 * cp) != 0) throw std::invalid_argument("sequences do not cut into 2 * cp chunks");
  for (int t = 0; t < seq_len / cp; t++) positions_.push_back(cp_position(cp, rank, seq_len, t));
}

std::vector<SequenceShare::Run> SequenceShare::runs(int first, int rows) const {
  if (cp_ == 1) return {{0, rows, first}};
  std::vector<Run> out;  // a run ends with a chunk (or with the rows)
  const int T = (int)positions_.size(), chunk = T / 2;
  for (int row = first; row < first + rows;) {
    const int t = row % T, n = std::min(chunk - t % chunk, first + rows - row);
    out.push_back({row - first, n, positions_[t]});
    row += n;
  }
  return out;
}

void SequenceShare::take(int32_t* mine, const int32_t* whole, int B) const {
  if (cp_ == 1) return (void)std::memcpy(mine, whole, (size_t)B * seq_len_ * sizeof(int32_t));
  const size_t T = positions_.size();
  for (size_t b = 0; b < (size_t)B; b++)
    for (size_t t = 0; t < T; t++) mine[b * T + t] = whole[b * seq_len_ + positions_[t]];
}

std::vector<ChunkPair> ring_pairs(int cp, int rank, int src) {
  std::vector<ChunkPair> pairs;
  for (int qh = 0; qh < 2; qh++)
    for (int kh = 0; kh < 2; kh++) {
      const int q = cp_chunk(cp, rank, qh), k = cp_chunk(cp, src, kh);
      if (k < q) pairs.push_back({qh, kh, false});
      else if (k == q) pairs.push_back({qh, kh, true});
    }
  return pairs;
}

double ring_work(int cp, int rank) {
  double w = 0;
  for (int src = 0; src < cp; src++)
    for (const ChunkPair& p : ring_pairs(cp, rank, src)) w += p.causal ? 0.5 : 1.0;
  return w;
}

}  // namespace trainer
