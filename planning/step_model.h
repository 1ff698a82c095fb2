#pragma once
// Predicted time of one optimizer step of a recipe's layout on a profiled
// machine (planning/machine_profile.h). Each pipeline stage's chunks are
// traced through the real model code (planning/chunk_trace.h) and priced op
// by op; the stages then run their schedule (parallel/pipeline_schedule.h)
// in a discrete-event simulation in which the ranks computing at a moment
// share the node's compute units (cores on a CPU, where a stage idle in the
// bubble leaves its cores to the others; one device per rank on GPUs);
// context-parallel transfers count where the ops in flight with them cannot
// hide them (the ring's behind its attention; the all-to-all's not at all);
// after it come the data-parallel gradient reduction (the part not hidden
// behind the backward), tied-embedding and sequence-parallel sums, the
// gradient norm and AdamW.
#include <map>
#include <string>
#include <vector>

#include "recipe/recipe.h"
#include "planning/chunk_trace.h"
#include "planning/machine_profile.h"
#include "planning/pipeline_sim.h"

namespace trainer {

struct ChunkTrace;

struct StepPrediction {
  double step_ms = 0;
  // The slowest stage's share of it: forward + backward compute at full
  // speed (recomputation included, and apart), its tensor-parallel
  // collectives, its context-parallel transfers' exposed part, its time
  // waiting on the pipeline and on sharing compute units with other ranks.
  double compute_ms = 0, recompute_ms = 0, tp_comm_ms = 0, cp_comm_ms = 0, pp_wait_ms = 0, contention_ms = 0;
  double dp_comm_ms = 0, dp_exposed_ms = 0;  // the data-parallel reduction, and the part not overlapped
  double optimizer_ms = 0;                   // tied-embedding and SP sums, gradient norm, AdamW
  double step_factor = 1;                    // the profile's real step against its prediction: step_ms includes it
  double tokens_per_s = 0, mfu = 0;          // mfu: model FLOPs over the profile's GEMM rate of the job's units
  double save_s = 0;                         // a blocking checkpoint save: its bytes at the profile's disk speed
  int unpriced_ops = 0;                      // calls of ops the profile has no figure for (counted as 0 ms)
  std::vector<std::string> unpriced_comm;    // collectives it has no figure for
  // Of those, the transfers inside a layer that a layout cannot be priced
  // without (a cut sequence's attention): plan --search ranks no such layout.
  std::vector<std::string> unpriced_transfers;
  int profile = 0;                           // with several profiles (StepModels): whose prediction this is
  // Per pipeline stage (x step_factor): wall time inside its actions, and
  // waiting in its schedule for the others; what smoke measures per stage.
  std::vector<double> stage_busy_ms, stage_wait_ms;
};

// The parts of a predicted step, named once for every printer: the JSON key
// (plan --json, smoke's "predicted"), the heading of plan --search's column
// (a parenthesized one is printed in parentheses) and the words of smoke's
// line (null: not there). Clamped parts are differences of two predictions,
// shown as 0 where rounding left them below.
struct PredictionPart {
  const char* key;
  double StepPrediction::*ms;
  const char* column;
  const char* words;
  bool clamped;
};
inline constexpr PredictionPart kPredictionParts[] = {
    {"compute_ms", &StepPrediction::compute_ms, "compute", "compute", false},
    {"recompute_ms", &StepPrediction::recompute_ms, "(recompute)", nullptr, true},
    {"tp_comm_ms", &StepPrediction::tp_comm_ms, "tp-comm", "tp", true},
    {"cp_comm_ms", &StepPrediction::cp_comm_ms, "cp-exposed", "cp exposed", false},
    {"pp_wait_ms", &StepPrediction::pp_wait_ms, "pp-wait", "pp wait", true},
    {"contention_ms", &StepPrediction::contention_ms, "shared", "shared", true},
    {"dp_comm_ms", &StepPrediction::dp_comm_ms, nullptr, nullptr, false},
    {"dp_exposed_ms", &StepPrediction::dp_exposed_ms, "dp-exposed", "dp exposed", false},
    {"optimizer_ms", &StepPrediction::optimizer_ms, "optimizer", "optimizer", false},
};

// checkpoint.every = "auto" for a step time: the interval (Daly) and the
// share of time expected in saves and in redone work.
struct CheckpointAdvice {
  long every_steps = 0;
  double save_s = 0, saves_share = 0, redone_share = 0;
};
CheckpointAdvice checkpoint_advice(double save_s, double mtbf_hours, double step_ms);

class StepModel {
 public:
  // ranks_per_node: how many of the job's ranks share a node's compute units.
  StepModel(const MachineProfile& p, int ranks_per_node) : p_(p), per_node_(ranks_per_node) {}
  StepPrediction predict(const Recipe& r);

 private:
  struct ChunkCost {
    double fwd_ms = 0, bwd_ms = 0;            // compute, at full speed
    double fwd_comm_ms = 0, bwd_comm_ms = 0;  // tensor-parallel collectives and cp_ms
    double cp_ms = 0;                         // context-parallel transfers, the exposed part
    double per_step_comm_ms = 0;              // sequence-parallel gradient sums
    size_t params = 0;
    double boundary_bytes = 0;
    int unpriced_ops = 0;               // what the profile could not price
    std::vector<std::string> unpriced_comm, unpriced_transfers;  // (StepPrediction's)
  };
  const ChunkCost& chunk_cost(const Recipe& r, const ChunkSpec& spec, RecomputeMode mode);
  void price_cp(const Recipe& r, const ChunkTrace& t, const std::vector<double>& op_ms, ChunkCost& c);
  struct Stages {
    std::vector<StageWork> work;
    std::vector<double> params, no_recompute, per_step, cp;
    double msg_ms = 0;  // a pipeline message, sent to received
  };
  Stages price_stages(const Recipe& r, StepPrediction& out);
  std::pair<double, double> dp_reduction(const Recipe& r, int stage, double params, double last_bwd,
                                         std::vector<std::string>& unpriced);
  double optimizer_ms(const Recipe& r, double params, StepPrediction& out);
  double comm(const std::string& op, int group, double bytes, std::vector<std::string>& unpriced);

  const MachineProfile& p_;
  int per_node_;
  // What decides a chunk's trace besides the model (one StepModel prices
  // one model's layouts): its layer count, embedding and head, and the
  // shard shape. Traces are the same for every stage of the same key.
  struct TraceKey {
    int layers;
    bool embed, head;
    ShardShape shape;
    auto operator<=>(const TraceKey&) const = default;
  };
  std::map<TraceKey, ChunkCost> cache_;
};

// Several calibrations of one machine, taken at different moments (a shared
// host's speed moves by tens of percent over minutes, and one calibration
// sees one moment): a layout is priced with each profile and the prediction
// with the median step time is kept whole, so its parts still add up (for an
// even count, the lower of the middle two). Not the median of each figure:
// figures from different moments (an anchor's measured step from one, the
// ops it is set against from another) do not make a profile of any moment.
class StepModels {
 public:
  StepModels(const std::vector<MachineProfile>& profiles, int ranks_per_node);
  StepPrediction predict(const Recipe& r);

 private:
  std::vector<StepModel> models_;
};

}  // namespace trainer
