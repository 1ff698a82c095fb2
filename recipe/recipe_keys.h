#pragma once
// Every recipe key, declared once: its section and name, type, default,
// allowed range or choices, help text, and where it lives in Recipe.
// Reading and validating a recipe (app/recipe.cpp), deriving the defaults of
// a typed edit (a layout `plan --search` tries), printing the resolved
// recipe (--print-config, recipe.resolved.toml, a checkpoint's recipe.toml),
// `trainer train --keys` and the README's table all come from this list.
// Rules between keys (divisibility, min_lr <= lr, ...) are in
// recipe/recipe_rules.h.
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "recipe/recipe.h"

namespace trainer {

using KeyValue =
    std::variant<long, double, bool, std::string, std::vector<std::string>, std::vector<DataSource>, RopeScaling>;

// Sources: a list of paths/globs or { path, weight, name } tables (blends).
// RopeScaling: an inline table with Hugging Face's rope_scaling fields.
enum class KeyType { Int, Float, Bool, String, List, Choice, Sources, RopeScaling };

struct RecipeKey {
  std::string section, name;
  KeyType type = KeyType::Int;
  std::string help;
  // Default, from the keys read before this one and the job's world size
  // (0: no job); default_text says it in words where it is computed.
  std::function<KeyValue(const Recipe&, int world_size)> def;
  std::string default_text;
  std::function<void(Recipe&, const KeyValue&)> set;
  std::function<KeyValue(const Recipe&)> get;
  // Numbers: allowed range, an open end excludes the bound; zero_off: 0 is
  // allowed outside the range and means "off". Ints also fit their field.
  double lo = -1e300, hi = 1e300;
  bool lo_open = false, hi_open = false, zero_off = false;
  long int_max = 2147483647;  // int fields; long fields raise it
  bool fp32 = false;          // a float field: the range holds for the fp32 value too
  // Ints that may also be the word auto_word ("auto"), stored as auto_value.
  std::string auto_word;
  long auto_value = 0;
  bool is_auto(const KeyValue& v) const {
    return !auto_word.empty() && std::holds_alternative<long>(v) && std::get<long>(v) == auto_value;
  }
  std::vector<std::string> choices;
  // A grid dimension's name where this Choice is the way that dimension's
  // group runs (its choices, each a way): plan --search tries each where
  // the dimension splits the job, the memory advice falls back on another.
  std::string way_of;
  // Printed only when this holds (keys one architecture ignores).
  std::function<bool(const Recipe&)> shown;

  std::string full() const { return section + "." + name; }
  // "" when v is allowed, else why not ("must be >= 1").
  std::string check(const KeyValue& v) const;
  // What is allowed, in words ("an integer >= 1", "a number in [0, 1)").
  std::string allowed() const;
};

const std::vector<RecipeKey>& recipe_keys();
const std::vector<std::string>& recipe_sections();
// The key named "section.key"; nullptr if there is none.
const RecipeKey* find_recipe_key(const std::string& full_key);
// The keys that are ways a dimension's group runs (RecipeKey::way_of), in table order.
std::vector<const RecipeKey*> ways_of(const char* dim);

// Every key at its default, as a recipe with no keys would load; for code
// and tests that build a Recipe without a file.
Recipe default_recipe(int world_size = 0);

// k at its default, computed from the keys before it in the table and the
// job's world size (0: no job). "" when set; else why the default cannot be
// held (a computed Int default past its field: the message names the keys
// it comes from).
std::string apply_default(const RecipeKey& k, Recipe& r, int world_size);
// Every key the recipe did not give (Recipe::origin) at its default, in
// table order: how the reader completes a file, and how a typed edit is
// derived again exactly as the file with that --set would be. "" or the
// first problem ("where: [section] key: why").
std::string apply_defaults(Recipe& r, int world_size);
// A typed edit, as --set section.key=value makes it: range-checked, set,
// marked given and overridden. "" or the problem ("--set section.key:
// [section] key: why"). Then apply_defaults derives the other keys again
// and check_recipe (recipe/recipe_rules.h) checks the rules.
std::string edit_key(Recipe& r, const std::string& full_key, const KeyValue& v);

// A value as TOML text; floats in their shortest form that reads back the same.
std::string toml_text(const KeyValue& v, KeyType type);
// A key's value as TOML text (an Int key's auto value as its word).
std::string toml_text(const RecipeKey& k, const KeyValue& v);

// `trainer train --keys [markdown]`: every key with type, default, allowed
// values and help, as a plain list or as the README's markdown table.
std::string describe_keys(bool markdown);

}  // namespace trainer
