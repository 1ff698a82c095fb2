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

std::string Recipe::layout_summary() const {
  const GridShape& g = parallel.grid;
  std::string s = "dp=" + std::to_string(g.dp) + " pp=" + std::to_string(g.pp) + " tp=" + std::to_string(g.tp);
  if (parallel.sequence_parallel && g.tp > 1) s += " (sequence parallel)";
  if (g.pp > 1) s += parallel.schedule == ScheduleKind::OneFOneB ? " 1f1b" : " interleaved x" + std::to_string(parallel.virtual_stages);
  if (g.cp > 1) s += " cp=" + std::to_string(g.cp) + " (" + cp_comm_name(parallel.cp_comm) + " attention)";
  return s;
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
