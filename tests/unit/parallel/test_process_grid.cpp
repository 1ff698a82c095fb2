// The process grid's rank order (parallel/process_grid.h).
#include <gtest/gtest.h>

#include "parallel/process_grid.h"

using namespace trainer;

TEST(Grid, TensorParallelFastestThenPipelineThenData) {
  const GridShape g{2, 2, 2};
  const GridCoords c5 = grid_coords(g, 5);  // 5 = dp 1, pp 0, tp 1
  EXPECT_EQ(c5.dp, 1);
  EXPECT_EQ(c5.pp, 0);
  EXPECT_EQ(c5.tp, 1);
  const GridCoords c6 = grid_coords(g, 6);
  EXPECT_EQ(c6.dp, 1);
  EXPECT_EQ(c6.pp, 1);
  EXPECT_EQ(c6.tp, 0);
}
