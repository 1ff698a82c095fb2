#include "app/output_guard.h"

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "runtime/errors.h"

namespace trainer {

namespace fs = std::filesystem;

namespace {
// A step directory (its manifest, or a step_N name: a save in progress
// counts) or a checkpoint directory (its `latest`, or committed steps).
bool is_checkpoint_dir(const fs::path& d) {
  std::error_code ec;
  if (checkpoint_step(d.string()) >= 0 || fs::exists(d / "manifest", ec)) return true;
  if (fs::is_regular_file(d / "latest", ec)) return true;
  return !committed_checkpoints(d.string()).empty();
}
}  // namespace

void check_outside_checkpoints(const std::string& path, const std::string& kind) {
  std::error_code ec;
  // Resolved, so that a symlink into a checkpoint is seen for what it is.
  const fs::path full = fs::weakly_canonical(fs::absolute(path, ec), ec);
  for (fs::path d = full.parent_path(); !d.empty(); d = d.parent_path()) {
    if (is_checkpoint_dir(d))
      throw RecipeError(path + ": inside the checkpoint directory " + d.string() + ", where the " + kind +
                        " would replace or sit among the checkpoint's own files; give --output a path outside it "
                        "(--force does not change this)");
    if (d == d.root_path()) break;
  }
}

void check_output_path(const std::string& path, const std::string& kind, bool force,
                       const std::function<bool(const std::string&)>& same_kind) {
  check_outside_checkpoints(path, kind);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_regular_file(st))
    throw RecipeError(path + ": exists and is not a regular file (a directory, FIFO or device); the " + kind +
                      " is written only as a new file or over a file; give --output another path");
  if (force || same_kind(path)) return;
  throw RecipeError(path + ": exists and is not an earlier " + kind + ", so writing the " + kind +
                    " would destroy it; give --output another path, or add --force to replace it");
}

}  // namespace trainer
