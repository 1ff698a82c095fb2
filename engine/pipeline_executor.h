#pragma once
// The pipeline executor: walks one stage's schedule (parallel/pipeline_schedule.h)
// over this rank's model chunks, moving activations and gradients between
// stages with non-blocking point-to-point messages. Without pipeline
// parallelism the schedule is the plain loop "forward, backward" per
// micro-batch and no message is sent.
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "data/loader.h"
#include "model/transformer.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"
#include "runtime/backend.h"

namespace trainer {

// What one walk of the schedule measured on this rank.
struct ScheduleTimes {
  double compute_ms = 0;    // forward and backward
  double pipe_wait_ms = 0;  // waiting on pipeline receives: the bubble
  int peak_in_flight = 0;   // most micro-batches holding activations at once
};

class PipelineExecutor {
 public:
  // chunks: this stage's model chunks (owned by the caller, who keeps them
  // alive); pp: the pipeline group, null without pipeline parallelism.
  PipelineExecutor(Backend& be, const PipelineSpec& spec, int stage, DataComm* pp,
                   std::vector<std::unique_ptr<Transformer>>& chunks);
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // The micro-batches of one optimizer step, forward and backward; batch(mb)
  // is first asked for in micro-batch order. The losses stay on the device
  // (Transformer::keep_losses_on_device), read once at the step's end.
  using BatchSource = std::function<const Batch&(int mb)>;
  void run_step(const BatchSource& batch, float grad_scale, ScheduleTimes* times);
  // Forward only, one micro-batch through the virtual pipeline (evaluation).
  // Returns its loss on the stage with the head, else 0.
  double forward_only(const Batch& b);
  // Called from chunk c's last backward of each step as its gradients become
  // final (Transformer::set_grad_hook's offsets). Empty: none.
  void set_final_backward_hook(std::function<void(int chunk, size_t from)> hook) { hook_ = std::move(hook); }

 private:
  enum Kind { kAct = 0, kGrad = 1, kGradOut = 2 };
  Ref message_buffer(int kind, int mb, int chunk);
  int tag(int kind, int mb, int chunk) const;
  int take_slot(int chunk, int mb);
  void release_slot(int chunk, int mb);
  void post_recv(const PipeAction& a);
  void post_ahead(size_t i);
  void wait_recv(const PipeAction& a, ScheduleTimes* times);
  void forward(const PipeAction& a, const BatchSource& batch, float grad_scale, size_t i,
                 ScheduleTimes* times);
  void backward(const PipeAction& a, size_t i, ScheduleTimes* times);
  void send_act(const PipeAction& a);
  void send_grad(const PipeAction& a);

  Backend& be_;
  PipelineSpec spec_;
  int stage_;
  DataComm* pp_;
  std::vector<std::unique_ptr<Transformer>>& chunks_;
  std::function<void(int, size_t)> hook_;
  std::vector<size_t> last_backward_;  // per chunk: its last Backward's index in schedule_
  std::vector<PipeAction> schedule_;  // this stage's
  std::vector<std::vector<int>> free_slots_;
  std::vector<std::map<int, int>> slot_of_mb_;
  std::map<std::tuple<int, int, int>, Buffer> messages_;  // (kind, mb, chunk), compute type
  // In flight during run_step.
  std::map<std::tuple<int, int, int>, DataComm::Handle> recvs_, act_sends_;
  std::vector<DataComm::Handle> grad_sends_;
  int in_flight_ = 0;
};

}  // namespace trainer
