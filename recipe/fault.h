#pragma once
// Fault injection for the supervision tests: what to break, where and when.
// Faults come from the recipe ([fault] inject = ["crash rank=3 step=7", ...])
// and from the environment (TRAINER_FAULT="crash rank=3 step=7; nan step=5"),
// one syntax for both:
//   crash     rank=R step=K          rank R dies (SIGKILL) as it starts step K
//   segv      rank=R step=K          rank R gets SIGSEGV as it starts step K (a crash report is written)
//   hang      rank=R step=K          rank R stops before its next collective in step K
//   freeze    rank=R step=K          rank R's process is stopped (SIGSTOP) inside its next
//                                    collective in step K, watchdog and all: no dump from it
//   slow      rank=R ms=X [step=K]   rank R computes X ms longer per step (from step K)
//   nan       step=K [rank=R]        a NaN enters rank R's gradients in step K (default rank 0),
//                                    once per launch (a rollback does not meet it again)
//   nan_weight step=K [rank=R]       after step K's update one of rank R's weights is NaN, as
//                                    after an update that overflowed; once per launch
//   ckpt_kill point=P step=K         every rank dies at commit point P of the save at step K
//                                    (P: shards_written, manifest_written, renamed, latest_written)
//   bad_batch step=K                 step K's batches arrive corrupted on every rank (target ids
//                                    moved by vocab/2): a real loss spike; once per launch
//   ckpt_hang rank=R step=K          rank R stops in the (synchronous) save at step K before
//                                    writing its file, as on a stalled file system
//   setup_stall rank=R ms=X          rank R pauses X ms in set-up, after taking the run
//                                    directory, as on a slow file system (a signal then
//                                    arrives during set-up)
//   setup_fail rank=R point=P        rank R fails (exit 2) at the end of set-up step P, the
//                                    others going on (P: one of kSetupSteps)
// Every fault also takes launch=N (the supervisor's launch it fires in, from
// 0; default 0: only the first launch) or launch=all. Steps count from 1.
#include <string>
#include <vector>

namespace trainer {

struct Fault {
  enum Kind { Crash, Segv, Hang, Freeze, Slow, Nan, NanWeight, BadBatch, CkptKill, CkptHang, SetupStall, SetupFail } kind = Crash;
  int rank = 0;
  long step = 0;       // 0: every step (slow) / any step (ckpt_kill)
  double ms = 0;       // slow
  std::string point;   // ckpt_kill, setup_fail
  int launch = 0;      // -1: every launch
  std::string text;    // as written, for messages
};

// The steps of a job's set-up, in the order they run (app/cmd_train.cpp and
// engine/job.h): every rank agrees whether one failed before the next starts.
inline constexpr const char* kSetupSteps[] = {"run_dirs", "memory", "data",   "backend", "grid",  "model",
                                              "weights",  "peak",   "disk",   "metrics", "health"};

// Parses "kind key=value ..." items separated by ';'. Throws RecipeError
// naming `where` and the offending item.
std::vector<Fault> parse_faults(const std::string& spec, const std::string& where);

// The faults that apply to this process: this launch (TRAINER_ATTEMPT, set by
// the supervisor; 0 when unsupervised) and this world rank.
class FaultPlan {
 public:
  FaultPlan() = default;
  FaultPlan(std::vector<Fault> faults, int world_rank, int launch);
  bool empty() const { return faults_.empty(); }
  // The faults of `kind` that fire at `step` (step 0 in a fault: any step).
  std::vector<const Fault*> at(Fault::Kind kind, long step) const;
  // Extra compute per step for this rank from slow faults active at `step`.
  double slow_ms(long step) const;

 private:
  std::vector<Fault> faults_;
};

}  // namespace trainer
