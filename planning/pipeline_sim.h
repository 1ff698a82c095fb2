#pragma once
// The pipeline schedule of one step (parallel/pipeline_schedule.h) run as
// events, with the stages' ranks sharing a node's compute units: an action
// computes (slowed by the measured factor for the number of the node's
// ranks computing at that moment), then communicates (tensor-parallel
// collectives, at their own speed); a receive waits for its message, which
// arrives msg_ms after its send. planning/step_model.h builds the inputs.
#include <functional>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace trainer {

// One stage's work, per model chunk, in ms at full speed.
struct StageWork {
  std::vector<double> fwd, bwd, fwd_comm, bwd_comm;
  double ranks = 0;  // its ranks on a node (what computing it adds to the busy count)
};

struct StageTimes {
  double end = 0;        // its schedule's last action
  double full = 0;       // its actions at full speed (compute + collectives)
  double in_action = 0;  // wall time inside its actions (full + slowed by sharing)
  double last_bwd = 0;   // its last backward's compute at full speed
};

// How much slower compute runs while `busy` of a node's ranks compute and
// the others wait (MachineProfile::slowdown); empty: never slower.
using Slowdown = std::function<double(double busy)>;

// Throws std::logic_error if the schedule deadlocks.
std::vector<StageTimes> simulate_shared(const PipelineSpec& pipe, const std::vector<StageWork>& w, double msg_ms,
                                        const Slowdown& slowdown = {});

}  // namespace trainer
