#include "parallel/context_chunks.h"

namespace trainer {

const char* cp_comm_name(CpComm c) { return c == CpComm::A2a ? "a2a" : "ring"; }

int cp_chunk(int cp, int rank, int half) { return half == 0 ? rank : 2 * cp - 1 - rank; }

int cp_position(int cp, int rank, int seq_len, int t) {
  const int chunk = seq_len / (2 * cp);
  return cp_chunk(cp, rank, t / chunk) * chunk + t % chunk;
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
