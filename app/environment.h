#pragma once
// What the trainer takes from its environment, read in app/ only: the layers
// below are handed these values (engine/job.h's Job, BackendOptions,
// PrepareConfig, make_tokenizer's folder).
#include <string>

namespace trainer {

// This rank's index on its node as the launcher numbers it
// (OMPI_COMM_WORLD_LOCAL_RANK, then SLURM_LOCALID, then LOCAL_RANK); -1 when
// none is set (a single process: device 0).
int launcher_local_rank();

// The sgemm peak cache (runtime/peak_cache.h):
// ${TRAINER_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/trainer}/peak_gflops; ""
// when no home or cache directory is known.
std::string peak_cache_file();

// $TRAINER_ATTEMPT: the launch number `trainer supervise` gives each launch
// (of the job, or of its health check); -1 when not supervised.
int supervisor_launch();

// $TRAINER_START_MARKS: where `trainer supervise` has each host of a launch
// leave a file when its first rank starts; "" when unset.
std::string start_marks_dir();

// $TRAINER_TOKENIZER_DIR: where gpt2 and llama3 look for their ranks file
// first (data/tokenizer.h); "" when unset.
std::string tokenizer_dir();

}  // namespace trainer
