#pragma once
// Reading and printing recipes: app/recipe.cpp is the only code that knows
// TOML. The typed Recipe itself is recipe/recipe.h, its keys
// recipe/recipe_keys.h, the rules between them recipe/recipe_rules.h.
#include <string>
#include <vector>

#include "recipe/recipe.h"
#include "recipe/recipe_keys.h"

namespace trainer {

// Reads path, applies overrides ("section.key=value"), validates everything
// that can be checked before training (including that data files exist) and
// returns the recipe. world_size fills parallel.dp when it is left out (0: no
// job yet, dp defaults to 1 and is not checked against a world size);
// need_data = false skips the data section's file checks (benchmarks).
// Throws RecipeError whose message names the file, line and key.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size, bool need_data);

// The resolved recipe as TOML text (what --print-config prints and
// recipe.resolved.toml holds); loading it again gives the same recipe.
std::string recipe_to_toml(const Recipe& r);

// What `trainer status` needs from a run's recipe.resolved.toml, read
// without validation (the data may have moved since). Missing keys keep
// these defaults; an unreadable file gives all defaults.
struct RunFacts {
  long steps = 0;            // training.steps (0: unknown)
  long checkpoint_every = -1;  // checkpoint.every (-1: unknown)
  std::string checkpoint_dir;  // checkpoint.dir, as written (relative to where the run was launched)
};
RunFacts read_run_facts(const std::string& resolved_recipe_path);

// Keys whose value differs between a recorded resolved recipe (a
// checkpoint's recipe.toml) and this one, as "section.key" with both values
// as TOML text ("(absent)" when one side lacks the key). Sections that only
// say how to run ([checkpoint], [supervisor], [launch], [fault]) and run.name
// and run.dir are not compared. Throws RecipeError if old_text is not TOML.
struct RecipeChange {
  std::string key, was, now;
};
std::vector<RecipeChange> recipe_changes(const std::string& old_text, const Recipe& now);

// "3.3.0": the TOML library's version, for `trainer --version`.
std::string toml_library_version();

// Levenshtein distance (for "did you mean").
int edit_distance(const std::string& a, const std::string& b);

}  // namespace trainer
