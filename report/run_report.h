#pragma once
// `trainer report`: one self-contained HTML page about a run (inline SVG
// charts, tables; no scripts, nothing from the network), from its files
// (report/run_files.h) and what app/ read from its resolved recipe.
#include <string>
#include <utility>
#include <vector>

#include "report/run_files.h"
#include "runtime/memory.h"

namespace trainer {

struct ReportFacts {
  std::string run_dir, run_name;
  std::string recipe_error;  // why the resolved recipe could not be read ("": it was)
  std::vector<std::pair<std::string, std::string>> recipe;  // summary rows, in order
  long steps = 0;               // training.steps (0: unknown)
  double tokens_per_step = 0;   // global batch x sequence length (0: unknown)
  bool has_plan = false;
  double plan_mb[kMemKinds] = {};  // `trainer plan`'s prediction for rank 0
  std::string plan_note;           // which stage and recompute mode
  std::string generated_by;        // "trainer 0.1.0 (git ...)"
  double now = 0;                  // when the page is made (seconds since the epoch)
};

std::string render_report(const RunFiles& files, const ReportFacts& facts);

// Whether `path` begins as render_report's pages do: what `trainer report
// --output` may replace without --force.
bool is_run_report(const std::string& path);

}  // namespace trainer
