#pragma once
// The pipeline schedule of one step (parallel/pipeline_schedule.h) run as
// events, with the stages' ranks sharing a node's compute units: an action
// computes (slowed while the ranks computing, plus the waiting ones' share,
// want more units than there are), then communicates (tensor-parallel
// collectives, at their own speed); a receive waits for its message, which
// arrives msg_ms after its send. planning/step_model.h builds the inputs.
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace trainer {

// One stage's work, per model chunk, in ms at full speed.
struct StageWork {
  std::vector<double> fwd, bwd, fwd_comm, bwd_comm;
  double demand = 0;  // compute units its ranks on a node want while computing
};

struct StageTimes {
  double end = 0;        // its schedule's last action
  double full = 0;       // its actions at full speed (compute + collectives)
  double in_action = 0;  // wall time inside its actions (full + slowed by sharing)
  double last_bwd = 0;   // its last backward's compute at full speed
};

struct Sharing {
  double units = 1e9;         // compute units of a node (large: none shared)
  double waiting_share = 0;   // the part of its demand a waiting stage keeps (CPU ranks poll)
  double overhead = 1;        // the cost of sharing beyond dividing the units
};

// Throws std::logic_error if the schedule deadlocks.
std::vector<StageTimes> simulate_shared(const PipelineSpec& pipe, const std::vector<StageWork>& w, double msg_ms,
                                        const Sharing& sharing);

}  // namespace trainer
