#include "supervise/decide.h"

#include <cstring>

#include "runtime/errors.h"

namespace trainer {

bool retryable(int code) {
  return code != kExitUsage && code != kExitData && code != kExitCheckpoint && code != kExitBadStep &&
         code != kExitPreempted && code != kExitOk && code != kExitNoSpace && code != kExitUnfitNode && code != 126 &&
         code != 127;
}

std::string exit_code_meaning(int code) {
  if (const char* m = exit_meaning(code)) return m;
  switch (code) {
    case 126: return "the launch command cannot be executed";
    case 127: return "the launch command was not found";
  }
  if (code > 128 && code < 128 + 65)
    return std::string("killed by signal ") + std::to_string(code - 128) + " (" + strsignal(code - 128) + ")";
  return "failure";
}

namespace {

using Kind = Action::Kind;
using Why = Action::Why;

Action exit_with(int code, Why why) { return {Kind::Exit, code, 0, why}; }

// A launch that no host is blamed for (or whose hosts stay): done, stopped,
// given up, or restarted after the backoff.
Action settle(const SuperviseState& s, const JobExit& job) {
  if (job.code == kExitOk) return exit_with(kExitOk, job.stopped_early ? Why::Paused : Why::Done);
  if (job.code == kExitPreempted || job.forwarded)
    // A job stopped on our signal ends with the requeue code however it
    // ended (a rank killed by the signal while MPI came up: 138), unless it
    // failed for a reason a requeue cannot fix.
    return exit_with(job.code == kExitPreempted || retryable(job.code) ? kExitPreempted : job.code, Why::Preempted);
  if (!retryable(job.code)) return exit_with(job.code, Why::NotRetryable);
  if (s.restarts >= s.policy.max_restarts) return exit_with(kExitGaveUp, Why::BudgetSpent);
  return {Kind::Restart, 0, s.policy.backoff_before(s.restarts), Why::None};
}

// Hosts the blamed ones' exclusion or a wait left enough of: what the
// exclusion was for goes on.
Action go_on(const SuperviseState& s, const Outcome& o) {
  switch (o.blame) {
    case Blame::Health: return {Kind::Launch};
    // A swap that took no spare (its host was unknown) restarts as a
    // failure would, without the budget: the job stopped because we asked.
    case Blame::Swap: return {Kind::Restart, 0, s.policy.backoff_before(s.restarts), Why::None};
    case Blame::Failure: break;
  }
  return settle(s, o.job);
}

}  // namespace

Action decide(const SuperviseState& s, const Outcome& o) {
  switch (o.kind) {
    case Outcome::Kind::Stop: return exit_with(kExitPreempted, Why::Stopped);
    case Outcome::Kind::HealthChecked:
      if (o.code == kExitOk) return {Kind::Launch};
      if (o.code == kExitNoSpace) return exit_with(kExitNoSpace, Why::DiskFull);  // no host to blame
      if (o.code == kExitUnfitNode) return {Kind::ExcludeBlamed, 0, 0, Why::None, Blame::Health};
      return {Kind::Launch, 0, 0, Why::CheckFailed};
    case Outcome::Kind::JobEnded:
      // A straggler is swapped only once the job checkpointed and stopped
      // as asked: one that failed meanwhile is judged as any failure, one
      // stopped by a signal to the supervisor too.
      if (o.job.swap_asked && !o.job.forwarded && o.job.code == kExitPreempted && !o.job.stop)
        return {Kind::ExcludeBlamed, 0, 0, Why::None, Blame::Swap};
      if (s.allocation && !o.job.forwarded && retryable(o.job.code))
        return {Kind::ExcludeBlamed, 0, 0, Why::None, Blame::Failure};
      return settle(s, o.job);
    case Outcome::Kind::HostsExcluded:
      switch (o.hosts) {
        case Outcome::Hosts::SparesIn:
          return o.blame == Blame::Health ? Action{Kind::Launch} : Action{Kind::RelaunchOnSpares};
        case Outcome::Hosts::SparesOnly: return go_on(s, o);
        case Outcome::Hosts::Unchanged:
          // Unfit, and nothing to exclude: launching would use the node the
          // job's own check would refuse.
          if (o.blame == Blame::Health) return exit_with(kExitUnfitNode, Why::UnfitUnexcluded);
          return go_on(s, o);
        case Outcome::Hosts::NoneLeft: break;
      }
      if (s.policy.elastic && o.usable > 0)
        return o.can_shrink ? Action{Kind::Shrink} : exit_with(kExitGaveUp, Why::ShrinkRefused);
      if (!s.policy.elastic && s.policy.spare_wait > 0) return {Kind::WaitForHosts};
      return exit_with(kExitGaveUp, Why::NoSpare);
    case Outcome::Kind::WaitEnded:
      // Hosts back: a relaunch that counts against max_restarts (a host
      // that comes and goes must not relaunch the job for ever).
      return o.hosts_back ? go_on(s, o) : exit_with(kExitGaveUp, Why::WaitOver);
  }
  return exit_with(kExitGaveUp, Why::None);  // (every kind returns above)
}

SuperviseState after(SuperviseState s, const Action& a) {
  if (a.kind == Kind::Restart) s.restarts++;
  return s;
}

}  // namespace trainer
