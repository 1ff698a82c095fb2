// Reading a recipe file (app/recipe.cpp): defaults derived from the world
// size, and the edit distance that suggests the nearest key for a typo.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/recipe.h"
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
