#pragma once
// How context parallelism cuts a sequence for causal attention (issue 48):
// T tokens in 2 x cp equal chunks, context-parallel rank r holding chunks r
// and 2cp-1-r (its "halves" 0 and 1), so every rank has one chunk from the
// early, cheap part of the causal triangle and one from the late, costly
// part, and all ranks do the same attention work (torchtitan's and
// Megatron-Core's head-tail balancing). Ring attention brings every rank's
// key/value chunks to every other; ring_pairs says which (query chunk, key
// chunk) pairs of a visit have visible keys and whether the mask is the
// causal diagonal or none at all. Pure arithmetic, testable without MPI.
#include <cstdint>
#include <vector>

namespace trainer {

// How the chunks' attention reaches the rest of the sequence
// (parallel.cp_comm; parallel/context_attention.h): k|v blocks round a ring,
// or an all-to-all from sequence shards to head shards.
enum class CpComm { Ring, A2a };
// "ring" or "a2a", as parallel.cp_comm spells them.
const char* cp_comm_name(CpComm c);

// The global chunk index (0 .. 2cp-1) of half 0 or 1 of context-parallel rank `rank`.
int cp_chunk(int cp, int rank, int half);

// The position in its sequence (0 .. seq_len - 1) of token t (0 .. seq_len / cp
// - 1) of context-parallel rank `rank`'s share: its two chunks, one after the
// other.
int cp_position(int cp, int rank, int seq_len, int t);

// A rank's share of each sequence, which the model's tokens and positions
// follow: its two chunks under context parallelism, the whole sequence in
// order without.
class SequenceShare {
 public:
  // cp ranks share each sequence of seq_len tokens, this is rank `rank` of
  // them. Throws std::invalid_argument where the sequence does not cut into
  // 2 x cp equal chunks.
  SequenceShare(int cp, int rank, int seq_len);
  // Each of this rank's seq_len / cp tokens' place in the whole sequence.
  const std::vector<int>& positions() const { return positions_; }
  // Token rows first .. first + rows - 1 of [B, seq_len / cp] in runs of
  // consecutive places: (row from `first`, rows, place of the first); one
  // run for a whole sequence (the backend's position kernels wrap).
  struct Run {
    int row, rows, pos;
  };
  std::vector<Run> runs(int first, int rows) const;
  // This rank's tokens [B, seq_len / cp] of B whole sequences [B, seq_len].
  void take(int32_t* mine, const int32_t* whole, int B) const;

 private:
  int cp_, seq_len_;
  std::vector<int> positions_;
};

// One pair of chunks a rank's attention visits: its query half against the
// key/value half of rank `src`. causal: the same chunk, so query i sees key
// j <= i; otherwise the key chunk lies wholly in the queries' past and every
// key is seen. Pairs whose keys lie wholly in the future are left out.
struct ChunkPair {
  int q_half, k_half;
  bool causal;
};
std::vector<ChunkPair> ring_pairs(int cp, int rank, int src);

// A rank's attention work over a whole ring, in chunk-pair units (a full
// pair 1, a causal pair 1/2): the same for every rank under this cut.
double ring_work(int cp, int rank);

}  // namespace trainer
