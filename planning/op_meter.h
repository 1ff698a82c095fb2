#pragma once
// A backend that records every op the model issues, with its shape, and
// optionally runs and times it on a real backend. It is how the cost model
// learns what a layout computes without a second description of the model:
// the Transformer itself runs on it.
//
//   trace mode (inner = null): nothing is computed; buffers are untouched
//     virtual memory (mmap'd without reserving), so tracing a large model's
//     chunk costs neither time nor RAM. `trainer plan --search` uses it.
//   timing mode (inner = a real backend): each op runs there and its wall
//     time is recorded (the device synchronized around it). `trainer
//     calibrate` uses it to measure the ops the model really issues.
//
// An op's key names its kind, shape and element type; the same key costs
// the same wherever it occurs, which is what lets a profile measured on one
// layer price every layer of every layout with that shard shape.
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace trainer {

// PerStep: once per optimizer step (after the last backward), not per micro-batch.
enum class OpPhase { Forward, Backward, PerStep };

struct OpCall {
  std::string key;    // "matmul NT 256x576x192 f32"
  const char* name;   // "matmul"
  double flops = 0;   // matrix products and attention: multiply-adds x 2
  double bytes = 0;   // elementwise ops: bytes read and written
  double ms = 0;      // timing mode only
  OpPhase phase = OpPhase::Forward;
};

class MeteredBackend final : public Backend {
 public:
  explicit MeteredBackend(Backend* inner = nullptr);
  ~MeteredBackend() override;
  void set_phase(OpPhase p) { phase_ = p; }
  const std::vector<OpCall>& calls() const { return calls_; }
  void clear_calls() { calls_.clear(); }
  bool timing() const { return inner_ != nullptr; }

  std::string name() const override { return "metered"; }
  std::string device_name() const override { return inner_ ? inner_->device_name() : ""; }
  const MemoryStats& memory() const override { return inner_ ? inner_->memory() : mem_.stats(); }
  void reset_memory_peaks() override;
  // Every operation of runtime/backend_ops.inc.
#define TRAINER_BACKEND_OP TRAINER_BACKEND_OVERRIDE
#include "runtime/backend_ops.inc"
  void synchronize() override;
  CRef product_operand(CRef x, size_t n, DType dt) override { return inner_ ? inner_->product_operand(x, n, dt) : x; }

 protected:
  void* allocate(size_t bytes, Mem kind, Space space) override;
  void release(void* p) override;

 private:
  // Records one call (key = name + " " + shape) and, in timing mode, runs
  // and times it.
  template <class F>
  void op(const char* name, const std::string& shape, double flops, double bytes, F&& run);
  Backend* inner_;
  OpPhase phase_ = OpPhase::Forward;
  std::vector<OpCall> calls_;
  MemoryTracker mem_;  // trace mode
  std::vector<std::pair<void*, size_t>> maps_;
};

}  // namespace trainer
