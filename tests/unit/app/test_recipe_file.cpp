// Reading a recipe file (app/recipe.cpp): defaults derived from the world
// size, and the edit distance that suggests the nearest key for a typo.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/recipe.h"
#include "app/recipe_args.h"
#include "runtime/errors.h"
#include "data/token_shard.h"

using namespace trainer;

namespace fs = std::filesystem;

TEST(Recipe, DefaultsFillDpFromWorldSize) {
  char tmpl[] = "/tmp/trainer_rdef_XXXXXX";
  const std::string d = mkdtemp(tmpl);
  write_token_shard(d + "/a.bin", std::vector<uint32_t>(100, 1));
  std::ofstream(d + "/r.toml") << "[data]\ntrain = \"" + d + "/a.bin\"\n[training]\nglobal_batch = 8\n";
  const Recipe r = load_recipe(d + "/r.toml", {}, 4, true);
  EXPECT_EQ(r.parallel.grid.dp, 4);
  EXPECT_EQ(r.accum_steps(), 2);
  EXPECT_EQ(r.model.arch, Arch::GPT2);
  EXPECT_EQ(r.data.train_files, std::vector<std::string>{d + "/a.bin"});
  fs::remove_all(d);
}

TEST(Recipe, EditDistance) {
  EXPECT_EQ(edit_distance("stpes", "steps"), 2);
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("d_model", "d_model"), 0);
}

namespace trainer {
// The one reader of command-line numbers (issue 66): the whole text, in
// range, never wrapped, saturated or infinite; the message names the option.
TEST(CommandLine, NumbersAreReadWholeInRangeAndNeverWrap) {
  EXPECT_EQ(option_integer("--nodes", "4", 1, 1048576), 4);
  EXPECT_EQ(option_integer("--warmup", "0", 0, 10), 0);
  EXPECT_EQ(option_integer("--x", "-3", -5, 5), -3);
  for (const char* bad : {"4294967297", "99999999999999999999", "-1", "0", "", "-", "+4", " 4", "4 ", "4x", "0x10",
                          "1e3", "4.0"})
    try {
      option_integer("--nodes", bad, 1, 1048576);
      ADD_FAILURE() << bad << " was taken";
    } catch (const RecipeError& e) {
      EXPECT_NE(std::string(e.what()).find("--nodes"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[1, 1048576]"), std::string::npos) << e.what();
    }
  EXPECT_DOUBLE_EQ(option_number("--memory-per-rank-gb", "2.5", 0, 1e6, true), 2.5);
  EXPECT_DOUBLE_EQ(option_number("--tolerance", "1e-1", 0, 1), 0.1);
  for (const char* bad : {"0", "inf", "-inf", "nan", "1e300", "1e999", "0x10", "2.5GB", "", "-1", "1e6.5"})
    EXPECT_THROW(option_number("--memory-per-rank-gb", bad, 0, 1e6, true), RecipeError) << bad;
}
}  // namespace trainer
