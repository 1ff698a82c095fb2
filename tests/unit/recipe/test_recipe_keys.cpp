// The key table (recipe/recipe_keys.h): its defaults pass their own checks
// and are what an empty recipe file loads as. Reading files is
// tests/unit/app/test_recipe_file.cpp; the messages of bad recipes,
// tests/unit/app/test_recipe_errors.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "app/recipe.h"
#include "recipe/recipe_keys.h"

using namespace trainer;

namespace fs = std::filesystem;

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

// A run's first line says its layout as it runs: sequence parallelism only
// where tp splits the rows (it was said at tp 1), the schedule only with
// stages, and the cp group's attention as parallel.cp_comm chose it (an
// all-to-all run was said to be a ring).
TEST(Recipe, LayoutSummarySaysWhatRuns) {
  Recipe r = default_recipe();
  r.parallel.grid = {};
  r.parallel.grid.dp = 2, r.parallel.sequence_parallel = true;
  EXPECT_EQ(r.layout_summary(), "dp=2 pp=1 tp=1");
  r.parallel.grid.tp = 2, r.parallel.grid.pp = 2, r.parallel.schedule = ScheduleKind::OneFOneB;
  EXPECT_EQ(r.layout_summary(), "dp=2 pp=2 tp=2 (sequence parallel) 1f1b");
  r.parallel.schedule = ScheduleKind::Interleaved, r.parallel.virtual_stages = 2;
  EXPECT_EQ(r.layout_summary(), "dp=2 pp=2 tp=2 (sequence parallel) interleaved x2");
  r.parallel.grid = {}, r.parallel.grid.dp = 2, r.parallel.grid.cp = 2, r.parallel.cp_comm = CpComm::A2a;
  EXPECT_EQ(r.layout_summary(), "dp=2 pp=1 tp=1 cp=2 (a2a attention)");
  r.parallel.cp_comm = CpComm::Ring;
  EXPECT_EQ(r.layout_summary(), "dp=2 pp=1 tp=1 cp=2 (ring attention)");
}
