// The key table (recipe/recipe_keys.h) in process: defaults derived from the
// world size, the nearest-key distance, and defaults that pass their own checks.
// The messages of bad recipes, through the binary, are tests/unit/app/test_recipe_errors.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "app/recipe.h"
#include "data/token_shard.h"
#include "recipe/recipe_keys.h"

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

// The key table (recipe/recipe_keys.cpp) is the one declaration of every key:
// its defaults pass its own checks, an empty recipe loads as
// default_recipe(), and every number key refuses nan and inf.
TEST(Recipe, KeyTableDefaultsAreValidAndMatchAnEmptyRecipe) {
  const Recipe def = default_recipe();
  for (const RecipeKey& k : recipe_keys()) {
    if (k.full() == "parallel.dp" || k.full() == "training.global_batch") continue;  // from the world size
    EXPECT_EQ(k.check(k.def(def, 0)), "") << k.full();
    if (k.type == KeyType::Float) {
      EXPECT_NE(k.check(std::nan("")), "") << k.full();
      EXPECT_NE(k.check(HUGE_VAL), "") << k.full();
    }
  }
  char tmpl[] = "/tmp/trainer_rkeys_XXXXXX";
  const std::string d = mkdtemp(tmpl);
  std::ofstream(d + "/empty.toml") << "";
  const Recipe loaded = load_recipe(d + "/empty.toml", {}, 0, false);
  auto body = [](const std::string& t) { return t.substr(t.find('\n')); };  // past the "from PATH" line
  EXPECT_EQ(body(recipe_to_toml(loaded)), body(recipe_to_toml(def)));
  // Every section and key a recipe may use appears in the table once.
  std::set<std::string> seen;
  for (const RecipeKey& k : recipe_keys()) EXPECT_TRUE(seen.insert(k.full()).second) << k.full() << " twice";
  fs::remove_all(d);
}
