#include "ckpt/output_guard.h"

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "runtime/errors.h"

namespace trainer {

namespace fs = std::filesystem;

namespace {
// A step directory: its manifest, or a step_N name (a save in progress counts).
bool is_step_dir(const fs::path& d) {
  std::error_code ec;
  return checkpoint_step(d.string()) >= 0 || fs::exists(d / "manifest", ec);
}
// A step directory or a checkpoint directory (its `latest`, or committed steps).
bool is_checkpoint_dir(const fs::path& d) {
  std::error_code ec;
  if (is_step_dir(d)) return true;
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

void check_outside_steps(const std::string& dir, const std::string& key) {
  std::error_code ec;
  // Resolved, so that a symlink into a step directory is seen for what it is.
  const fs::path abs = fs::absolute(dir, ec);
  fs::path full = fs::weakly_canonical(abs, ec);
  if (ec || full.empty()) full = abs.lexically_normal();
  // A step directory: a step_N name with its manifest, or in a checkpoint
  // directory (a save in progress); a user's own "step_1" elsewhere is not.
  auto step = [&](const fs::path& d) {
    return checkpoint_step(d.string()) >= 0 && (fs::exists(d / "manifest", ec) || is_checkpoint_dir(d.parent_path()));
  };
  for (fs::path d = full; !d.empty(); d = d.parent_path()) {
    if (step(d))
      throw RecipeError(key + " " + dir + ": " + (d == full ? "is" : "lies inside") + " the checkpoint step " +
                        d.string() + ", which the run that wrote it removes when it prunes (checkpoint.keep), and "
                        "this run's files and checkpoints with it; give a directory outside any checkpoint step");
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
