// Checkpoints during the step loop: every checkpoint.every steps, at the last
// step and where the run stops (exit_after); blocking, or snapshotted and
// written in the background (checkpoint.async) and committed at a later step
// boundary. A failed save is fatal only with checkpoint.required.
#include <cmath>
#include <csignal>
#include <cstdio>

#include "engine/step_loop.h"
#include "runtime/elapsed.h"
#include "runtime/errors.h"
#include "parallel/mpi_world.h"

namespace trainer {

void StepLoop::committed(const std::string& where) {
  if (where.empty()) return;
  newest_ = where;
  if (lead_) note_newest_checkpoint(newest_);
}

// Waits for a background save in flight, so the newest checkpoint is final.
void StepLoop::finish_async() {
  if (!r_.checkpoint.async || !rank_step_.async_save_pending()) return;
  const std::string where = rank_step_.poll_async_save(world_, true);
  committed(where);
  if (!where.empty() && lead_) std::printf("checkpoint: %s committed\n", where.c_str());
}

// ckpt_kill faults: this process SIGKILLs itself at that commit point;
// ckpt_hang: this rank stops before writing its file.
void StepLoop::fault_at_commit_point(const char* point) {
  const long at = rank_step_.steps_done();
  for (const Fault* f : job_.faults.at(Fault::CkptKill, at))
    if (f->point == point) std::raise(SIGKILL);
  if (std::string(point) == "writing" && !job_.faults.at(Fault::CkptHang, at).empty()) {
    std::fprintf(stderr, "fault injection: rank %d stops in the checkpoint save of step %ld\n", rank_, at);
    job_.recorder->stop_here();
  }
}

// Commits a finished background save (waiting for it when `wait`).
void StepLoop::commit_async(bool wait, bool saving_now, bool* did) {
  const std::string where = rank_step_.poll_async_save(world_, wait);
  if (!where.empty()) *did = true;
  committed(where);
  if (!where.empty() && lead_)
    std::printf("checkpoint: %s committed%s\n", where.c_str(), saving_now ? "" : " (written in the background)");
}

// checkpoint.every = "auto": whether the interval since the last save has
// passed; rank 0 decides from its step times, every rank follows (collective).
bool StepLoop::auto_save_due(const StepStats& st) {
  int due = 0;
  if (lead_) {
    auto_interval_->stepped(st.step_ms);
    due = st.step - std::max(last_saved_, first_) >= auto_interval_->steps();
  }
  world_.broadcast(&due, sizeof due, 0);
  return due;
}

// A timed save re-estimates the automatic interval; rank 0 says what it is now.
void StepLoop::note_auto_save(double blocking_ms) {
  if (!lead_ || !auto_interval_) return;
  auto_interval_->saved(blocking_ms);
  const double d = auto_interval_->save_s(), m = r_.checkpoint.mtbf_hours * 3600;
  const ExpectedLoss loss = expected_loss(daly_interval_s(d, m), d, m);
  std::printf("checkpoint: automatic interval now %ld steps (save %.2f s blocking, MTBF %.3g h: %.2f%% of the time "
              "in saves, %.2f%% expected redone)\n",
              auto_interval_->steps(), d, r_.checkpoint.mtbf_hours, 100 * loss.saves, 100 * loss.redone);
}

// Returns the blocking time of a save or commit this step (ms), else -1.
double StepLoop::save_or_commit(const StepStats& st) {
  const CheckpointSection& ck = r_.checkpoint;
  const bool at_end = st.step == end_;
  const bool due = ck.automatic() ? auto_save_due(st) : ck.saves() && st.step % ck.every == 0;
  // A step whose loss is not finite (its update skipped) is never what a
  // checkpoint holds: the save falls to the next step whose loss is.
  const bool wanted = ck.saves() && (due || save_owed_ || st.step == r_.training.steps || at_end);
  const bool bad_loss = !std::isfinite(st.loss);
  save_owed_ = wanted && bad_loss;
  const bool save_now = wanted && !bad_loss;
  if (save_owed_ && lead_)
    std::fprintf(stderr, "note: step %ld: no checkpoint of a step whose loss is not finite; %s\n", st.step,
                 at_end ? "this was the last step: the newest checkpoint is the last one written"
                        : "the next step whose loss is saves");
  if (!save_now && !rank_step_.async_save_pending()) return -1;
  const auto t0 = Clock::now();
  bool did = save_now;
  phase(save_now ? "checkpoint save" : "checkpoint commit", st.step);
  try {
    // Before the next save, and at the end of the run, wait for the pending one.
    if (ck.async && rank_step_.async_save_pending()) commit_async(save_now || at_end, false, &did);
    // The run still owns its directories (checked at every heartbeat, and
    // here again right before a save's first write, after the wait for the
    // one before): a directory renamed meanwhile is not written again.
    if (save_now && lead_) check_locks();
    if (save_now && ck.async) {
      rank_step_.start_async_save(ck.dir, ck.keep, world_, job_.recipe_text);
      if (at_end) commit_async(true, true, &did);
    } else if (save_now) {
      const std::string where = rank_step_.save_checkpoint(ck.dir, ck.keep, world_, job_.recipe_text,
                                                      [this](const char* p) { fault_at_commit_point(p); });
      committed(where);
      if (lead_) std::printf("checkpoint: step %ld saved to %s\n", st.step, where.c_str());
    }
    if (save_now) last_saved_ = st.step, bad_steps_.saved();
  } catch (const CheckpointError& e) {
    if (ck.required)
      throw CheckpointError("checkpoint of step " + std::to_string(st.step) +
                            " failed (checkpoint.required = true): " + e.what());
    if (lead_)
      std::fprintf(stderr,
                   "warning: checkpoint of step %ld failed: %s. Training continues (checkpoint.required = true "
                   "makes this fatal); %s\n",
                   st.step, e.what(),
                   newest_.empty() ? "no checkpoint of this run is committed yet"
                                   : ("the newest committed checkpoint is " + newest_).c_str());
    return -1;
  }
  if (!did) return -1;
  const double ms = ms_since(t0);
  if (save_now && ck.automatic()) note_auto_save(ms);
  return ms;
}

}  // namespace trainer
