#pragma once
// Where a command writes a file the user names (--output): a run report, a
// checkpoint export, a machine profile. Such a file replaces an earlier
// output of the same kind, and nothing else unless the user says --force: not
// a user's notes, not a run's metrics.jsonl. Nothing is ever written inside a
// checkpoint (a step directory, or the checkpoint directory that holds them),
// --force or not: an output there would replace a shard, `latest` or a
// manifest, or look like a checkpoint's own file.
#include <functional>
#include <string>

namespace trainer {

// Throws RecipeError (exit 2) naming `path` when it lies inside a checkpoint.
// `kind` names the output in messages ("run report").
void check_outside_checkpoints(const std::string& path, const std::string& kind);

// A directory a run writes ([run] dir, [checkpoint] dir, [metrics]
// tensorboard_dir) is never a checkpoint's step directory nor inside one:
// the run that owns the step removes it when it prunes (checkpoint.keep),
// and this run's files and committed checkpoints would go with it. Throws
// RecipeError (exit 2) naming `key`.
void check_outside_steps(const std::string& dir, const std::string& key);

// That, and an existing `path` must be a regular file that `same_kind` takes
// for an earlier output of this kind, or `force` be given. Throws RecipeError.
void check_output_path(const std::string& path, const std::string& kind, bool force,
                       const std::function<bool(const std::string&)>& same_kind);

}  // namespace trainer
