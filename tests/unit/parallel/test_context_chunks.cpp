// The load-balanced cut of a sequence for context parallelism
// (parallel/context_chunks.h) against a token-by-token count: the chunk
// pairs a rank's ring visits hold exactly the (query, key) pairs causal
// attention needs for its tokens, each once, and every rank does the same
// work.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "parallel/context_chunks.h"

using namespace trainer;

TEST(ContextChunks, RingPairsCoverTheCausalTriangleOnceWithEqualWork) {
  for (int cp : {1, 2, 3, 4, 8}) {
    const int C = 3, T = 2 * cp * C;  // 3 tokens a chunk
    std::set<int> chunks;
    std::set<std::pair<int, int>> seen;  // (query token, key token)
    for (int r = 0; r < cp; r++) {
      for (int half : {0, 1}) EXPECT_TRUE(chunks.insert(cp_chunk(cp, r, half)).second) << "chunk twice, cp " << cp;
      long pairs = 0;
      for (int src = 0; src < cp; src++)
        for (const ChunkPair& p : ring_pairs(cp, r, src))
          for (int i = 0; i < C; i++)
            for (int j = 0; j < (p.causal ? i + 1 : C); j++) {
              const int q = cp_chunk(cp, r, p.q_half) * C + i, k = cp_chunk(cp, src, p.k_half) * C + j;
              EXPECT_LE(k, q) << "a future key, cp " << cp;
              EXPECT_TRUE(seen.insert({q, k}).second) << "a pair twice, cp " << cp;
              pairs++;
            }
      // Rank r's queries are chunks r and 2cp-1-r: r + (2cp-1-r) = 2cp-1 whole
      // chunks of past keys (C x C pairs each), and two causal diagonals.
      EXPECT_EQ(pairs, (long)(2 * cp - 1) * C * C + 2 * (C * (C + 1) / 2)) << "unequal work, cp " << cp << " rank " << r;
      EXPECT_DOUBLE_EQ(ring_work(cp, r), 2.0 * cp) << "cp " << cp;
    }
    EXPECT_EQ((int)chunks.size(), 2 * cp);
    EXPECT_EQ((long)seen.size(), (long)T * (T + 1) / 2) << "every causal pair, cp " << cp;
  }
}

// Every position of a sequence is held by exactly one context-parallel rank,
// in two runs of consecutive positions: chunk r and chunk 2cp-1-r.
TEST(ContextChunks, PositionsCoverTheSequenceOnce) {
  for (int cp : {1, 2, 3, 4}) {
    const int T = 2 * cp * 3, local = T / cp;
    std::vector<int> holder(T, -1);
    for (int r = 0; r < cp; r++)
      for (int t = 0; t < local; t++) {
        const int pos = cp_position(cp, r, T, t);
        ASSERT_GE(pos, 0);
        ASSERT_LT(pos, T);
        EXPECT_EQ(holder[pos], -1) << "cp " << cp << ": position " << pos << " held twice";
        holder[pos] = r;
        // the plain cut: 2cp chunks of 3, rank r holding chunks r and 2cp-1-r
        EXPECT_EQ(pos / 3, t < 3 ? r : 2 * cp - 1 - r);
        EXPECT_EQ(pos % 3, t % 3);
      }
    for (int p = 0; p < T; p++) EXPECT_NE(holder[p], -1) << "cp " << cp << ": position " << p << " held by none";
  }
}

// A rank's share: its tokens of whole sequences are the ones at its places,
// and a range of its rows cut into runs covers the range once, each run
// holding consecutive places (a plain loop over the rows as the reference);
// a sequence that does not cut into 2 x cp chunks is refused.
TEST(ContextChunks, ASequenceShareTakesItsTokensAndRunsCoverItsRows) {
  for (int cp : {1, 2, 3}) {
    const int T = 2 * cp * 4, local = T / cp, B = 2;
    std::vector<int32_t> whole(B * T);
    for (int i = 0; i < B * T; i++) whole[i] = 1000 + i;
    for (int r = 0; r < cp; r++) {
      const SequenceShare share(cp, r, T);
      std::vector<int32_t> mine(B * local, -1);
      share.take(mine.data(), whole.data(), B);
      for (int b = 0; b < B; b++)
        for (int t = 0; t < local; t++) EXPECT_EQ(mine[b * local + t], whole[b * T + cp_position(cp, r, T, t)]);
      for (int first : {0, 3}) {
        const int rows = B * local - first - 1;
        int next = 0;
        for (const SequenceShare::Run& run : share.runs(first, rows)) {
          EXPECT_EQ(run.row, next) << "cp " << cp << " rank " << r;
          for (int i = 0; i < run.rows && cp > 1; i++)
            EXPECT_EQ(run.pos + i, cp_position(cp, r, T, (first + run.row + i) % local)) << "cp " << cp << " rank " << r;
          next += run.rows;
        }
        EXPECT_EQ(next, rows) << "cp " << cp << " rank " << r;
      }
    }
  }
  EXPECT_THROW(SequenceShare(2, 0, 6), std::invalid_argument);
}
