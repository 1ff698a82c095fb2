#pragma once
// Pipeline schedules as plain data: for each stage, the ordered list of what
// it does in one optimizer step. A stage holds `virtual_stages` model chunks;
// chunk c of stage s is virtual stage c*stages + s (Megatron's interleaving),
// so with one chunk per stage this is the ordinary pipeline. The executor in
// app/ walks its stage's list; tests run the lists through simulate() without
// a model.
#include <string>
#include <vector>

namespace trainer {

enum class PipeOp { RecvAct, Forward, SendAct, RecvGrad, Backward, SendGrad };

struct PipeAction {
  PipeOp op;
  int mb;     // micro-batch
  int chunk;  // this stage's model chunk
};

enum class ScheduleKind { OneFOneB, Interleaved };

struct PipelineSpec {
  int stages = 1, virtual_stages = 1, micro_batches = 1;
  ScheduleKind kind = ScheduleKind::OneFOneB;
};

// Empty if the spec can be scheduled, else why not.
std::string check_pipeline(const PipelineSpec& p);
std::vector<std::vector<PipeAction>> build_schedule(const PipelineSpec& p);

// Neighbours of chunk c of stage s in the virtual pipeline.
struct PipePeer {
  int stage, chunk;
  bool exists;
};
PipePeer prev_in_pipeline(const PipelineSpec& p, int stage, int chunk);
PipePeer next_in_pipeline(const PipelineSpec& p, int stage, int chunk);

// Discrete-event run of a schedule: every compute action takes its time in
// units (forward fwd_units, backward bwd_units per chunk), messages arrive
// when sent, a receive waits for its send.
struct SimResult {
  bool deadlock = false;
  std::string error;         // first inconsistency found, if any
  long makespan = 0;         // time until the last stage finishes
  std::vector<long> idle;    // per stage: makespan minus busy time
  int peak_in_flight = 0;    // most micro-batch chunks with stored activations, any stage
  std::vector<int> stage_peak_in_flight;
};
SimResult simulate(const PipelineSpec& p, const std::vector<std::vector<PipeAction>>& sched,
                   int fwd_units = 1, int bwd_units = 2);

const char* op_name(PipeOp op);

}  // namespace trainer
