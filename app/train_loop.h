#pragma once
// The training loop of one rank: micro-batches with gradient accumulation,
// data-parallel gradient averaging, global-norm clipping, AdamW, evaluation.
// Takes the typed Recipe and a data-parallel communicator; the caller owns
// MPI, logging and files, so tests can drive steps directly.
#include <memory>

#include "app/recipe.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "model/adamw.h"
#include "model/transformer.h"
#include "parallel/comm_stats.h"
#include "parallel/communicator.h"
#include "runtime/backend.h"

namespace trainer {

struct StepStats {
  long step = 0;          // 1-based: optimizer steps completed
  double loss = 0;        // mean over the global batch
  double lr = 0;
  double grad_norm = 0;   // before clipping
  double step_ms = 0;
  double data_wait_ms = 0;  // slowest rank's wait on its loader this step
  CommCounters comm_dp, comm_tp;  // this rank's collectives during the step
};

class TrainLoop {
 public:
  // dp: this rank's data-parallel group; tp: its tensor-parallel group (may be
  // null or of size 1: no tensor parallelism).
  TrainLoop(Backend& be, Communicator& dp, Communicator* tp, const Recipe& r,
            const TokenDataset& train, const TokenDataset* val);
  StepStats step();
  // The first half of step(): gradients of the next global batch, reduced
  // over TP (sequence-parallel partials) and DP, not yet clipped or applied.
  // Returns the mean loss.
  double compute_gradients(double* data_wait_ms = nullptr);
  // Mean validation loss over training.eval_batches micro-batches per rank.
  double evaluate();
  Transformer& model() { return model_; }
  long steps_done() const { return step_; }
  const Loader& loader() const { return *loader_; }

 private:
  Backend& be_;
  CountingCommunicator dp_;
  std::unique_ptr<CountingCommunicator> tp_;
  const Recipe& r_;
  const TokenDataset* val_;
  Transformer model_;
  AdamW opt_;
  std::unique_ptr<Loader> loader_;
  long step_ = 0;
};

}  // namespace trainer
