#pragma once
// Where a training run starts, decided before it trains: from which
// checkpoint, and whether the checkpoint directory may be written at all.
// A run never overwrites or deletes a checkpoint it did not write or
// continue: every committed checkpoint in checkpoint.dir must be one this run
// resumes from or an older one of the same line. Anything else stops the run
// with a message that says what to do, unless the user starts over
// (`trainer train --start-over`), which moves those checkpoints aside into
// <checkpoint.dir>/previous/<time>/ (never deletes them).
#include <string>
#include <vector>

#include "app/recipe.h"
#include "runtime/run_lock.h"

namespace trainer {

// The directories a run writes ([run] dir, [checkpoint] dir when it saves):
// created, and shown writable now rather than at the first file written
// there; none of them, nor [metrics] tensorboard_dir, a checkpoint's step
// directory or inside one (ckpt/output_guard.h). Throws RecipeError (exit 2)
// naming the key.
void ensure_run_dirs(const Recipe& r);

// The directories a run writes ([run] dir, and [checkpoint] dir when it
// exists apart from it), locked for the lifetime of the locks (runtime/run_lock.h).
// `token`: a supervisor's lock token our job may share. Throws RecipeError
// (exit 2) naming the holder.
struct RunDirLocks {
  RunLock run, ckpt;
};
void lock_run_dirs(const Recipe& r, RunDirLocks& locks, const std::string& token);

struct ResumeDecision {
  std::string from;                 // step directory to resume from, "" for step 0
  std::vector<std::string> notes;   // lines to print (recipe changes accepted, checkpoints moved)
};

// Rank 0 only (file system work, no MPI). Throws RecipeError (exit 2) when the
// directory holds checkpoints the run would overwrite or the recipe differs in
// a key that changes the run's meaning, CheckpointError (exit 4) when the
// checkpoints there or the given one do not verify.
ResumeDecision decide_resume(const Recipe& r, bool start_over);

}  // namespace trainer
