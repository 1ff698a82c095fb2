// The memory pre-flight's advice (planning/memory_fit.h) when a recipe does
// not fit: under a pipeline ZeRO-3 keeps each gathered layer for the step
// by default (parallel.reshard_after_forward = false), so the advice also
// prices ZeRO-3 dropping them after the forward.
#include <gtest/gtest.h>

#include <string>

#include "app/recipe.h"
#include "planning/memory_fit.h"

using namespace trainer;

TEST(MemoryAdvice, OffersZeroThreeDroppingGatheredLayersUnderAPipeline) {
  const Recipe r = load_recipe("configs/demo.toml",
                               {"model.arch=\"llama\"", "model.n_layers=24", "parallel.dp=2", "parallel.pp=2",
                                "parallel.tp=1", "parallel.zero_stage=1"},
                               0, false);
  ASSERT_FALSE(r.parallel.reshard_after_forward) << "the default with pp > 1";
  Recipe kept = r, dropped = r;
  kept.parallel.zero_stage = dropped.parallel.zero_stage = 3;
  dropped.parallel.reshard_after_forward = true;
  const double need_kept = check_memory_within(kept, -1, true, 1e15).need;
  const double need_dropped = check_memory_within(dropped, -1, true, 1e15).need;
  ASSERT_LT(need_dropped, need_kept);
  const double between = (need_kept + need_dropped) / 2;
  EXPECT_FALSE(check_memory_within(kept, -1, true, between).fits);
  EXPECT_TRUE(check_memory_within(dropped, -1, true, between).fits);
  for (const Recipe& asked : {r, kept}) {
    const MemoryFit fit = check_memory_within(asked, -1, true, between);
    EXPECT_FALSE(fit.fits);
    const std::string offer = asked.parallel.zero_stage == 3
                                  ? "parallel.reshard_after_forward = true ("
                                  : "parallel.zero_stage = 3 with parallel.reshard_after_forward = true (";
    const size_t at = fit.message.find(offer);
    ASSERT_NE(at, std::string::npos) << fit.message;
    const std::string priced = fit.message.substr(at + offer.size(), fit.message.find(')', at) - at - offer.size());
    EXPECT_NE(priced.find("fits"), std::string::npos) << fit.message;
  }
}
