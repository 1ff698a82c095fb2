// The load-balanced cut of a sequence for context parallelism
// (parallel/context_chunks.h) against a token-by-token count: the chunk
// pairs a rank's ring visits hold exactly the (query, key) pairs causal
// attention needs for its tokens, each once, and every rank does the same
// work.
#include <gtest/gtest.h>

#include <set>
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
