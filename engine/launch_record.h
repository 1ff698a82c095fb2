#pragma once
// One line per launch of `trainer train` in <run.dir>/launches.jsonl (rank 0):
// when it started, at which step, from which checkpoint, on what (version,
// backend, device, layout, libraries). `trainer report` reads it to mark
// launches on a run's time axis and to name the versions; a run resumed by
// hand has launches as a supervised one does.
#include "engine/job.h"

namespace trainer {

// Returns "" when written, else the file and the system's reason (the caller
// reports it by the policy for the run's files).
std::string append_launch_record(const Job& job, long first_step);

}  // namespace trainer
