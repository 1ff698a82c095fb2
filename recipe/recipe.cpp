#include "recipe/recipe.h"

namespace trainer {

std::string RecipeOrigin::where(const std::string& section, const std::string& key) const {
  const std::string full = section + "." + key;
  if (overridden.count(full)) return "--set " + full;
  if (const auto it = lines.find(full); it != lines.end()) return it->second;
  if (const auto it = lines.find("[" + section + "]"); it != lines.end()) return it->second;
  return file;
}

}  // namespace trainer
