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
