#include "app/train_loop.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "model/init.h"
#include "model/lr_schedule.h"

namespace trainer {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

namespace {
std::unique_ptr<CountingCommunicator> count_tp(Communicator* tp) {
  return tp && tp->size() > 1 ? std::make_unique<CountingCommunicator>(*tp) : nullptr;
}
}  // namespace

TrainLoop::TrainLoop(Backend& be, Communicator& dp, Communicator* tp, const Recipe& r,
                     const TokenDataset& train, const TokenDataset* val)
    : be_(be), dp_(dp), tp_(count_tp(tp)), r_(r), val_(val),
      model_(be, r.model, r.training.micro_batch, TensorParallel{tp_.get(), r.sequence_parallel}),
      opt_(be, model_.registry(), r.adamw) {
  // Every replica draws the same initial weights from the run seed.
  std::vector<float> host(model_.num_params());
  init_params(model_.layout(), r.model, r.run.seed, host.data());
  be_.from_host(model_.params(), host.data(), host.size());
  LoaderConfig lc;
  lc.global_batch = r.training.global_batch;
  lc.micro_batch = r.training.micro_batch;
  lc.dp_rank = dp.rank();
  lc.dp_size = dp.size();
  lc.prefetch = r.data.prefetch;
  lc.seed = r.run.seed;
  loader_ = std::make_unique<Loader>(train, lc);
}

double TrainLoop::compute_gradients(double* data_wait_ms) {
  const int accum = r_.accum_steps();
  const size_t n = model_.num_params();
  const int tokens_per_micro = r_.training.micro_batch * r_.model.seq_len;
  // Each token's loss gradient is pre-scaled so that summing over micro-batches
  // and DP ranks yields the gradient of the mean loss over the global batch.
  const float grad_scale = 1.0f / ((float)tokens_per_micro * accum * dp_.size());
  be_.zero(model_.grads(), n);
  double loss_sum = 0, wait_ms = 0;
  for (int k = 0; k < accum; k++) {
    const auto tw = std::chrono::steady_clock::now();
    Batch b = loader_->next();
    wait_ms += ms_since(tw);
    loss_sum += model_.forward(b.inputs.data(), b.targets.data(), grad_scale);
    model_.backward();
  }
  model_.reduce_sequence_parallel_grads();
  dp_.allreduce_sum(model_.grads(), n);
  double loss = loss_sum / accum;
  dp_.allreduce_sum(&loss, 1);
  dp_.allreduce_max(&wait_ms, 1);
  if (data_wait_ms) *data_wait_ms = wait_ms;
  return loss / dp_.size();
}

StepStats TrainLoop::step() {
  const auto t0 = std::chrono::steady_clock::now();
  dp_.counters().reset();
  if (tp_) tp_->counters().reset();
  StepStats s;
  s.loss = compute_gradients(&s.data_wait_ms);
  s.grad_norm = std::sqrt(model_.grad_sumsq());
  s.lr = lr_at(r_.lr, step_, r_.training.steps);
  opt_.step(model_.params(), model_.grads(), (float)s.lr,
            clip_coefficient(s.grad_norm, r_.training.grad_clip));
  s.step = ++step_;
  s.step_ms = ms_since(t0);
  s.comm_dp = dp_.counters();
  if (tp_) s.comm_tp = tp_->counters();
  return s;
}

double TrainLoop::evaluate() {
  if (!val_) return 0;
  LoaderConfig lc;
  lc.micro_batch = r_.training.micro_batch;
  lc.global_batch = r_.training.eval_batches * lc.micro_batch * dp_.size();
  lc.dp_rank = dp_.rank();
  lc.dp_size = dp_.size();
  lc.prefetch = 0;
  lc.shuffle = false;  // the same validation samples every time
  Loader ld(*val_, lc);
  double sum = 0;
  for (int k = 0; k < r_.training.eval_batches; k++) {
    Batch b = ld.next();
    sum += model_.forward(b.inputs.data(), b.targets.data(), 0.f);
  }
  sum /= r_.training.eval_batches;
  dp_.allreduce_sum(&sum, 1);
  return sum / dp_.size();
}

}  // namespace trainer
