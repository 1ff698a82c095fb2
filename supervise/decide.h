#pragma once
// The supervisor's decisions, as one pure function: what happened (a launch
// ended, a health check, an exclusion of hosts, a wait for hosts, a stop
// signal) and what the supervisor remembers give what it does next. No
// process, clock or file is behind it, so every decision is unit-tested with
// scripted outcomes (tests/unit/supervise/test_decide.cpp); supervisor.cpp
// carries the actions out and says them in events.jsonl.
//
// The exit codes are runtime/errors.h's: 0 done; the job's own code when a
// retry cannot fix it (2, 3, 4, 6, 8, 10, 126, 127); 7 the restart budget
// spent or no spare left; 75 preempted (the scheduler may requeue).
#include <string>

#include "recipe/recipe.h"

namespace trainer {

// Whether a retry can fix a job that exited with `code`: not a wrong recipe,
// bad data, an unusable checkpoint, a NaN that on_nan = "stop" refused to
// train through, a full disk, a node the health check found unfit (the same
// nodes would be used again; with an allocation the supervisor runs the
// check itself and excludes the node), a launch command that cannot be run
// at all (126, 127 from the shell's convention), nor success or preemption.
bool retryable(int code);

// What an exit code means, for the event log and the console.
std::string exit_code_meaning(int code);

// What the supervisor is configured with and remembers between launches.
struct SuperviseState {
  SupervisorSection policy;  // max_restarts, the backoff, elastic, spare_wait
  bool allocation = false;   // hosts it may exclude and spares it may take
  int restarts = 0;          // restarts counted against policy.max_restarts so far
};

// Why hosts are being excluded: what the exclusion's outcome continues.
enum class Blame {
  Health,   // the health check before a launch found them unfit
  Failure,  // a failed launch's evidence blames them
  Swap,     // a straggler the supervisor stopped the job to swap out
};

// How a launch of the job ended, as the decisions need it.
struct JobExit {
  int code = 0;
  bool forwarded = false;      // a stop signal reached the supervisor and was passed on to the job
  bool stop = false;           // a stop signal has reached the supervisor (then no swap is made)
  bool swap_asked = false;     // the supervisor asked the job to checkpoint and stop, to swap a straggler
  bool stopped_early = false;  // exit 0 before training.steps (training.exit_after): paused, not done
};

// One thing that happened, for decide().
struct Outcome {
  enum class Kind;
  explicit Outcome(Kind k) : kind(k) {}
  enum class Kind {
    Stop,           // a stop signal while no job ran: before a launch, in a health check, a wait or a backoff
    HealthChecked,  // the health check before a launch ended with `code` (0 fit, 10 unfit, 8 disk full, else none)
    JobEnded,       // a launch ended: `job`
    HostsExcluded,  // the blamed hosts (for `blame`) were excluded: what that left
    WaitEnded,      // the wait for excluded hosts to come back ended: hosts_back
  } kind;
  int code = 0;  // HealthChecked
  JobExit job;    // JobEnded; and the launch an exclusion or a wait continues (Blame::Failure)
  Blame blame = Blame::Failure;  // HostsExcluded, WaitEnded
  // HostsExcluded: what the exclusion changed.
  enum class Hosts {
    Unchanged,   // none of the blamed hosts could be excluded (unknown, or already out)
    SparesOnly,  // only spares went: the launch keeps its hosts
    SparesIn,    // spares take the excluded hosts' places
    NoneLeft,    // too few usable hosts for a launch
  } hosts = Hosts::Unchanged;
  int usable = 0;           // NoneLeft: the usable hosts left
  bool can_shrink = false;  // NoneLeft, policy.elastic: a smaller job fits those hosts (planning/shrink.h)
  bool hosts_back = false;  // WaitEnded: enough hosts came back for a launch
};

// What to do next.
struct Action {
  enum class Kind {
    Launch,            // go on to the launch (after its health check)
    ExcludeBlamed,     // exclude the hosts the evidence blames, then decide on what that left
    RelaunchOnSpares,  // the next launch at once, on spares; not counted against max_restarts
    Shrink,            // run the smaller job on the hosts left (at once, not counted)
    WaitForHosts,      // wait up to policy.spare_wait for excluded hosts to come back
    Restart,           // the next launch after delay_s, counted against max_restarts
    Exit,              // end with `code`
  } kind = Kind::Exit;
  int code = 0;        // Exit
  double delay_s = 0;  // Restart
  // Why, for the event the supervisor writes with it.
  enum class Why {
    None,
    Done,             // 0: training finished
    Paused,           // 0: stopped at training.exit_after; the same command continues
    Stopped,          // 75: a stop signal while no job ran
    Preempted,        // 75 (or the job's code a requeue cannot fix): the job stopped on a stop signal
    NotRetryable,     // the job's code: a retry cannot fix it
    BudgetSpent,      // 7: max_restarts restarts used up
    NoSpare,          // 7: no spare left (no elastic shrink, no wait)
    ShrinkRefused,    // 7: no spare left and no smaller job fits the hosts left
    WaitOver,         // 7: spare_wait passed without enough hosts back
    DiskFull,         // 8: the health check found checkpoint.dir full on every host
    UnfitUnexcluded,  // 10: the health check found a node unfit and named no host to exclude
    CheckFailed,      // (Launch) the health check reached no verdict: launch without it
  } why = Why::None;
  Blame blame = Blame::Failure;  // ExcludeBlamed: what the exclusion is for
};

Action decide(const SuperviseState& state, const Outcome& outcome);

// The state after `action` is carried out: a restart is counted.
SuperviseState after(SuperviseState state, const Action& action);

}  // namespace trainer
