// The process grid's rank order (parallel/process_grid.h).
#include <gtest/gtest.h>

#include <set>
#include <tuple>

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

// Context-parallel ranks come next to the tensor-parallel ones (Megatron's
// order: tp, cp, pp, dp): every rank has one place, and a cp group's ranks are
// tp apart, all within tp * cp consecutive ranks (one node).
TEST(Grid, ContextParallelNextToTensorParallel) {
  const GridShape g{2, 2, 2, 3};  // dp, pp, tp, cp: 24 ranks
  ASSERT_EQ(g.ranks(), 24);
  std::set<std::tuple<int, int, int, int>> seen;
  for (int r = 0; r < g.ranks(); r++) {
    const GridCoords c = grid_coords(g, r);
    // The plain loop: rank = ((dp * pp + p) * cp + c) * tp + t.
    EXPECT_EQ(((c.dp * g.pp + c.pp) * g.cp + c.cp) * g.tp + c.tp, r);
    seen.insert({c.dp, c.pp, c.cp, c.tp});
  }
  EXPECT_EQ(seen.size(), 24u);
  const GridCoords c7 = grid_coords(g, 7);  // 7 = tp 1, cp 0, pp 1 (6 ranks per stage), dp 0
  EXPECT_EQ(c7.tp, 1);
  EXPECT_EQ(c7.cp, 0);
  EXPECT_EQ(c7.pp, 1);
  EXPECT_EQ(c7.dp, 0);
  const GridCoords c17 = grid_coords(g, 17);  // 17 = 12 (dp 1) + 5: pp 0, cp 2, tp 1
  EXPECT_EQ(c17.dp, 1);
  EXPECT_EQ(c17.pp, 0);
  EXPECT_EQ(c17.cp, 2);
  EXPECT_EQ(c17.tp, 1);
}

// Where a rank sits, in messages: the slowest dimension first.
TEST(Grid, PositionReadsAsTheLayoutIsWritten) {
  EXPECT_EQ(grid_position(GridShape{2, 2, 2}, 5), "dp 1, pp 0, cp 0, tp 1");
  EXPECT_EQ(grid_position(GridShape{2, 2, 2, 3}, 17), "dp 1, pp 0, cp 2, tp 1");
}

// A layout's sizes as users write them, from the one list of dimensions.
TEST(Grid, SizesNamesAndValuesSlowestFirst) {
  const GridShape g{2, 3, 4, 5};  // dp, pp, tp, cp
  EXPECT_EQ(grid_sizes(g), "dp 2 x pp 3 x cp 5 x tp 4");
  EXPECT_EQ(grid_names(), "dp * pp * cp * tp");
  EXPECT_EQ(grid_values(g), "2 * 3 * 5 * 4");
  EXPECT_EQ(grid_names(kModelDims), "pp * cp * tp");
  EXPECT_EQ(grid_sizes(g, kWeightReplicaDims, ", "), "dp 2, cp 5");
}
