#include "recipe/recipe.h"

namespace trainer {

std::string RecipeOrigin::where(const std::string& section, const std::string& key) const {
  const std::string full = section + "." + key;
  if (overridden.count(full)) return "--set " + full;
  if (const auto it = lines.find(full); it != lines.end()) return it->second;
  if (const auto it = lines.find("[" + section + "]"); it != lines.end()) return it->second;
  return file;
}

int Recipe::accum_steps() const {
  return (int)(training.global_batch / ((long)training.micro_batch * parallel.grid.dp));
}

PipelineSpec Recipe::pipeline() const {
  PipelineSpec p;
  p.stages = parallel.grid.pp;
  p.virtual_stages = parallel.virtual_stages;
  p.micro_batches = accum_steps();
  p.kind = parallel.schedule;
  return p;
}

}  // namespace trainer
