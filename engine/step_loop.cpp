#include "engine/step_loop.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>

#include "engine/launch_record.h"
#include "runtime/crash_report.h"
#include "runtime/errors.h"
#include "runtime/replace_file.h"
#include "runtime/stop_signal.h"
#include "parallel/mpi_world.h"

namespace trainer {

int run_step_loop(Job& job) { return StepLoop(job).run(); }

StepLoop::StepLoop(Job& job)
    : job_(job), r_(job.recipe), rank_step_(*job.rank_step), world_(job.grid->world()), lead_(world_.rank() == 0),
      rank_(world_.rank()), last_saved_(job.resumed_step), newest_(job.resumed_from),
      bad_steps_(r_.training), throughput_(r_.runtime.throughput_drop, r_.runtime.throughput_window),
      stragglers_(r_.runtime) {
  first_ = rank_step_.steps_done();
  end_ = r_.training.exit_after > 0 ? std::min(r_.training.steps, first_ + r_.training.exit_after)
                                    : r_.training.steps;
  // Before a save is timed, one is assumed to write this rank's file at
  // 200 MB/s (a modest disk): the first save comes early rather than late.
  if (r_.checkpoint.automatic() && lead_)
    auto_interval_ = std::make_unique<AutoCheckpointInterval>(r_.checkpoint.mtbf_hours,
                                                              std::max(0.1, rank_step_.checkpoint_file_bytes() / 200e6));
}

int StepLoop::run() {
  if (lead_) note_newest_checkpoint(newest_);  // what a stop signal from now on saves
  print_header();
  print_blend();
  if (lead_)
    if (const std::string err = append_launch_record(job_, first_); !err.empty()) run_file_unwritable(err);
  t_start_ = std::chrono::steady_clock::now();
  beat(rank_step_.steps_done());
  if (first_ >= r_.training.steps && lead_)
    std::printf("nothing to train: the run is at step %ld of training.steps = %ld\n", first_, r_.training.steps);
  while (rank_step_.steps_done() < end_) {
    if (const int sig = preemption_signal()) return save_for_preemption(sig);
    const long next = rank_step_.steps_done() + 1;
    phase("training", next);
    inject_faults(next);
    StepStats st;
    StepExtras x;
    try {
      const double median = bad_steps_.spike_median();
      st = one_step(median);
      if (st.nonfinite || st.spike) {
        const Next n = on_bad_step(st, median);
        if (n == Next::Stop) return kExitBadStep;
        if (n == Next::Retry) continue;
      } else {
        bad_steps_.applied(st.loss);
      }
      maybe_evaluate(st, x);
      track_stragglers(st, x);
      x.ckpt_ms = save_or_commit(st);
    } catch (const UserError& e) {
      abort_job(e.exit_code, e.what());
    } catch (const std::exception& e) {
      abort_job(kExitInternal, std::string("internal error: ") + e.what());
    }
    if (!st.nonfinite) last_loss_ = st.loss;  // the summary's final loss: the last finite one
    if (x.val >= 0) last_val_ = x.val;
    if (lead_ && x.straggler_report) report_stragglers(st, x.slow);
    if (lead_) watch_throughput(st);
    log_step(st, x);
  }
  print_summary();
  return kExitOk;
}

// Preemption: the ranks agree at the step boundary whether any got SIGTERM
// or SIGUSR1 (the signal, or 0).
int StepLoop::preemption_signal() {
  double sig = stop_signal();
  world_.allreduce_max(&sig, 1);
  return (int)sig;
}

// Every rank saves a checkpoint (blocking) and the job exits with the
// "requeue me" code.
int StepLoop::save_for_preemption(int sig) {
  try {
    phase("preemption checkpoint", rank_step_.steps_done());
    if (lead_) check_locks();
    finish_async();
    const long at = rank_step_.steps_done();
    std::string where = "(already saved)";
    if (at != last_saved_ && at > 0)
      where = rank_step_.save_checkpoint(r_.checkpoint.dir, r_.checkpoint.keep, world_, job_.recipe_text,
                                    [this](const char* p) { fault_at_commit_point(p); });
    if (lead_)
      std::printf("preempted: %s received; checkpoint of step %ld %s; exiting with code %d (requeue me)\n",
                  strsignal(sig), at, where.c_str(), kExitPreempted);
  } catch (const UserError& e) {
    abort_job(e.exit_code, std::string("preemption checkpoint failed: ") + e.what());
  }
  std::fflush(stdout);
  return kExitPreempted;
}

// Injected faults for the step about to run (recipe/fault.h).
void StepLoop::inject_faults(long next) {
  const FaultPlan& f = job_.faults;
  if (f.empty()) return;
  auto say = [&](const char* what) {
    std::fprintf(stderr, "fault injection: rank %d %s step %ld\n", rank_, what, next);
    std::fflush(stderr);
  };
  if (!f.at(Fault::Crash, next).empty()) {
    say("crashes at");
    std::raise(SIGKILL);
  }
  if (!f.at(Fault::Segv, next).empty()) {
    say("gets SIGSEGV at");
    std::raise(SIGSEGV);
  }
  if (!f.at(Fault::Hang, next).empty()) {
    say("stops before its next collective in");
    job_.recorder->hang_at_next_call();
  }
  if (!f.at(Fault::Freeze, next).empty()) {
    say("freezes (SIGSTOP) inside its next collective in");
    job_.recorder->freeze_in_next_collective();
  }
  // A NaN fires once per launch: a transient bad batch, which a rollback to
  // an earlier step must not meet again.
  for (const Fault* x : f.at(Fault::Nan, next))
    if (fired_once_.insert(x).second) rank_step_.poison_next_step();
  for (const Fault* x : f.at(Fault::BadBatch, next))
    if (fired_once_.insert(x).second) rank_step_.corrupt_next_step();
  rank_step_.set_extra_compute_ms(f.slow_ms(next));
}

StepStats StepLoop::one_step(double median) {
  rank_step_.set_loss_limit(median > 0 ? r_.training.spike_factor * median : std::numeric_limits<double>::infinity());
  StepStats st = rank_step_.step();
  for (const Fault* x : job_.faults.at(Fault::NanWeight, st.step))
    if (fired_once_.insert(x).second) rank_step_.poison_weights();
  job_.recorder->note_step(st.step);
  beat(st.step);
  return st;
}

void StepLoop::maybe_evaluate(const StepStats& st, StepExtras& x) {
  const bool last = st.step == r_.training.steps;
  if (job_.val.sources().empty() || !((r_.training.eval_every > 0 && st.step % r_.training.eval_every == 0) || last))
    return;
  phase("evaluation", st.step);
  RankStep::Evaluation ev = rank_step_.evaluate();
  x.val = ev.overall;
  x.val_sources = std::move(ev.sources);
  x.val_windows = ev.windows;
  if (lead_ && !ev.short_sources.empty() && !warned_short_val_) {
    warned_short_val_ = true;  // the same samples every evaluation: once is enough
    for (const auto& [name, held, reads] : ev.short_sources)
      std::fprintf(stderr,
                   "warning: evaluation: %s holds %zu windows of seq_len + 1 tokens but training.eval_batches x "
                   "micro_batch x dp = %zu are read, so %zu are counted twice or more; set training.eval_batches "
                   "<= %zu to read each once (metrics.jsonl val_windows says how many distinct windows were used)\n",
                   name.c_str(), held, reads, reads - held,
                   std::max<size_t>(1, held / (reads / r_.training.eval_batches)));
  }
}

// What this rank does between communication calls, for the flight recorder
// (a rank that is behind is named with it) and crash reports.
void StepLoop::phase(const char* what, long step) {
  job_.recorder->set_phase(what, step);
  crash_note(what, step);
}

// Rank 0 touches <run.dir>/heartbeat after every step: `trainer supervise`
// reads its age to find a hung job (and tells a full disk from a hang).
// First it checks that the run still owns its directories: a deleted .lock
// lets a second run in, and the saves and metrics after this step would
// interleave with its (runtime/run_lock.h).
void StepLoop::beat(long step) {
  if (!lead_) return;
  check_locks();
  const std::string err = replace_file(r_.run.dir + "/heartbeat",
                                       std::to_string(step) + " " + std::to_string(wall_seconds()) + "\n", false);
  if (!err.empty()) run_file_unwritable(err);
}

void StepLoop::check_locks() {
  for (const RunLock* lock : job_.locks)
    if (const std::string why = lock->lost(); !why.empty()) abort_job(kExitUsage, why);
}

// A run file (metrics, heartbeat) could not be written: the same policy as a
// failed checkpoint save. With checkpoint.required the job stops (exit 8);
// else it trains on, and says so once per file (the writer names the file).
void StepLoop::run_file_unwritable(const std::string& what) {
  if (r_.checkpoint.required)
    abort_job(kExitNoSpace, what + " (checkpoint.required = true makes a failed write of the run's files fatal); "
                            "free space and resume");
  if (unwritable_.insert(what.substr(0, what.find(':'))).second)
    std::fprintf(stderr, "warning: %s; training goes on (checkpoint.required = true makes this fatal)\n", what.c_str());
}

}  // namespace trainer
