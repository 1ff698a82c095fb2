#pragma once
// The step loop of `trainer train`: from the resumed step to training.steps
// (or training.exit_after), one optimizer step at a time, with what happens
// around a step split by what it does:
//   engine/step_loop.cpp       the loop, preemption, injected faults, evaluation
//   engine/failure_policy.cpp  a NaN/Inf or spiking step: skip, roll back or stop
//                              (engine/bad_step_policy.h decides)
//   engine/step_saves.cpp      checkpoint saves and commits (blocking or async)
//   engine/stragglers.cpp      naming ranks that compute slower than their peers, and
//                              throughput drops (engine/throughput_watch.h)
//   engine/step_log.cpp        metrics.jsonl, the step line, the run's header and summary
#include <chrono>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "data/blend.h"
#include "engine/bad_step_policy.h"
#include "engine/checkpoint_interval.h"
#include "engine/straggler_watch.h"
#include "engine/job.h"
#include "engine/throughput_watch.h"
#include "runtime/metrics.h"

namespace trainer {

// Runs the job's steps; returns the process exit code (0, 6 after a bad step
// the policy does not survive, 75 after a preemption checkpoint). Errors
// inside a step abort the job (abort_job).
int run_step_loop(Job& job);

class StepLoop {
 public:
  explicit StepLoop(Job& job);
  int run();

 private:
  // What one step produced besides its StepStats, for the log.
  struct StepExtras {
    double val = -1, ckpt_ms = -1;
    std::vector<std::pair<std::string, double>> val_sources;  // named validation sources
    size_t val_windows = 0;                                   // distinct windows the evaluation read
    bool straggler_report = false;
    StragglerReport slow;
  };
  enum class Next { Continue, Retry, Stop };  // after a bad step

  int preemption_signal();
  int save_for_preemption(int sig);
  void inject_faults(long next);
  StepStats one_step(double median);
  Next on_bad_step(const StepStats& st, double median);
  std::string set_aside(const std::string& step_dir, const std::string& evidence);
  std::string describe_bad_step(const StepStats& st, double median) const;
  void maybe_evaluate(const StepStats& st, StepExtras& x);
  void add_blend_counts(JsonRecord& rec);
  void print_blend() const;
  void track_stragglers(const StepStats& st, StepExtras& x);
  void watch_throughput(const StepStats& st);
  double save_or_commit(const StepStats& st);
  bool auto_save_due(const StepStats& st);
  void note_auto_save(double blocking_ms);
  void commit_async(bool wait, bool saving_now, bool* did);
  void finish_async();
  void committed(const std::string& where);
  void phase(const char* what, long step);
  void beat(long step);
  void check_locks();  // rank 0: aborts (exit 2) once a lock's path no longer names the locked file
  void fault_at_commit_point(const char* point);
  void log_step(const StepStats& st, const StepExtras& x);
  void run_file_unwritable(const std::string& what);
  double model_flops_utilization(double tokens_per_s);
  void print_stragglers(const StepStats& st, const StragglerReport& slow) const;
  void report_stragglers(const StepStats& st, const StragglerReport& slow);
  void write_event(const JsonRecord& e);
  void print_header() const;
  void print_summary();

  Job& job_;
  const Recipe& r_;
  RankStep& rank_step_;
  ControlComm& world_;
  const bool lead_;
  bool warned_short_val_ = false;
  bool stale_peak_noted_ = false;
  std::set<std::string> unwritable_;  // run files already reported unwritable
  const int rank_;
  long first_ = 0, end_ = 0;
  long last_saved_;      // a checkpoint of this step exists
  std::string newest_;   // the newest committed checkpoint, for messages and the stop note
  BadStepPolicy bad_steps_;  // training.on_nan, on_spike: the spike limit and the runs of bad steps
  bool save_owed_ = false;  // a save fell on a step whose loss was not finite: the next good step makes it
  std::set<const Fault*> fired_once_;  // nan and bad_batch faults: once per launch
  ThroughputWatch throughput_;
  StragglerWatch stragglers_;  // runtime.straggler_factor, straggler_every: the window and the newest report
  std::unique_ptr<AutoCheckpointInterval> auto_interval_;  // checkpoint.every = "auto" (rank 0 decides)
  std::unique_ptr<MetricsLog> events_;  // rank 0: the run's events.jsonl, opened at the first event
  double last_loss_ = 0, last_val_ = -1;
  std::unique_ptr<BlendOrder> blend_counter_;  // samples per blend source, for the metrics
  std::chrono::steady_clock::time_point t_start_;
};

}  // namespace trainer
