// The supervisor's decisions (supervise/decide.h) on scripted outcomes: every
// action it can take and every exit code it can end with, each against the
// rule the README states for it (a hand-written expectation, not the code's
// own output), with no process, clock, file or root behind them.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/errors.h"
#include "supervise/decide.h"

namespace trainer {
namespace {

using Kind = Action::Kind;
using Why = Action::Why;
using Hosts = Outcome::Hosts;

SuperviseState state(bool allocation = false) {
  SuperviseState s;
  s.policy.max_restarts = 3, s.policy.backoff = 1, s.policy.backoff_max = 60;
  s.allocation = allocation;
  return s;
}

Outcome job_ended(int code) {
  Outcome o{Outcome::Kind::JobEnded};
  o.job.code = code;
  return o;
}

Outcome excluded(Blame blame, Hosts hosts, int code = 137) {
  Outcome o{Outcome::Kind::HostsExcluded};
  o.blame = blame, o.hosts = hosts, o.job.code = code;
  return o;
}

Outcome health(int code) {
  Outcome o{Outcome::Kind::HealthChecked};
  o.code = code;
  return o;
}

void expect_exit(const Action& a, int code, Why why) {
  EXPECT_EQ(a.kind, Kind::Exit);
  EXPECT_EQ(a.code, code);
  EXPECT_EQ(a.why, why);
}

TEST(Decide, FinishedTrainingExitsZero) {
  expect_exit(decide(state(), job_ended(kExitOk)), kExitOk, Why::Done);
  expect_exit(decide(state(true), job_ended(kExitOk)), kExitOk, Why::Done);  // nothing to exclude after success
}

TEST(Decide, StoppedAtExitAfterIsPausedNotDone) {
  Outcome o = job_ended(kExitOk);
  o.job.stopped_early = true;
  expect_exit(decide(state(), o), kExitOk, Why::Paused);
}

TEST(Decide, ACrashRestartsAfterADoublingBackoffUntilTheBudgetIsSpent) {
  // max_restarts 3, backoff 1 s doubling: three restarts after 1, 2 and 4 s,
  // the fourth failure gives up with 7.
  SuperviseState s = state();
  const double delays[] = {1, 2, 4};
  for (double want : delays) {
    const Action a = decide(s, job_ended(128 + 11));  // SIGSEGV
    ASSERT_EQ(a.kind, Kind::Restart);
    EXPECT_DOUBLE_EQ(a.delay_s, want);
    s = after(s, a);
  }
  EXPECT_EQ(s.restarts, 3);
  expect_exit(decide(s, job_ended(128 + 11)), kExitGaveUp, Why::BudgetSpent);
}

TEST(Decide, TheBackoffStopsGrowingAtItsMaximum) {
  SuperviseState s = state();
  s.policy.max_restarts = 20, s.policy.backoff_max = 5, s.restarts = 10;  // 1 * 2^10 > 5
  const Action a = decide(s, job_ended(1));
  ASSERT_EQ(a.kind, Kind::Restart);
  EXPECT_DOUBLE_EQ(a.delay_s, 5);
}

TEST(Decide, AHangAWatchdogTimeoutAndAnInternalErrorAreRetried) {
  // A hang is killed (128 + SIGKILL); a watchdog ends its job with 5; 1 is
  // a bug or an unexpected system error: all may pass on a retry.
  for (int code : std::vector<int>{128 + 9, kExitCommTimeout, kExitInternal, 128 + 6}) {
    const Action a = decide(state(), job_ended(code));
    EXPECT_EQ(a.kind, Kind::Restart) << code;
  }
}

TEST(Decide, WhatARetryCannotFixEndsWithTheJobsOwnCode) {
  // The README's exit codes a retry cannot fix: recipe 2, data 3,
  // checkpoint 4, a bad step 6, disk full 8, unfit node 10; 126/127 the
  // launch command cannot run. With an allocation too (no host is blamed).
  for (bool allocation : {false, true})
    for (int code : std::vector<int>{kExitUsage, kExitData, kExitCheckpoint, kExitBadStep, kExitNoSpace, kExitUnfitNode, 126, 127})
      expect_exit(decide(state(allocation), job_ended(code)), code, Why::NotRetryable);
}

TEST(Decide, APreemptedJobExitsWithTheRequeueCode) {
  expect_exit(decide(state(), job_ended(kExitPreempted)), kExitPreempted, Why::Preempted);
  // Our stop signal passed on: a rank it killed as MPI came up (138) is
  // still a preemption; a failure a requeue cannot fix keeps its code.
  Outcome o = job_ended(128 + 10);
  o.job.forwarded = true, o.job.stop = true;
  expect_exit(decide(state(true), o), kExitPreempted, Why::Preempted);
  o.job.code = kExitData;
  expect_exit(decide(state(true), o), kExitData, Why::Preempted);
}

TEST(Decide, AStopSignalWhileNoJobRunsExitsWithTheRequeueCode) {
  // Before a launch, in a health check, in a wait for hosts, in a backoff.
  expect_exit(decide(state(true), Outcome(Outcome::Kind::Stop)), kExitPreempted, Why::Stopped);
}

TEST(Decide, AFailedLaunchWithAnAllocationExcludesTheBlamedHostsFirst) {
  const Action a = decide(state(true), job_ended(128 + 9));
  EXPECT_EQ(a.kind, Kind::ExcludeBlamed);
  EXPECT_EQ(a.blame, Blame::Failure);
  // Without an allocation there is nothing to exclude: a plain restart.
  EXPECT_EQ(decide(state(false), job_ended(128 + 9)).kind, Kind::Restart);
}

TEST(Decide, ACutHostIsReplacedBySparesAtOnceWithoutCountingARestart) {
  SuperviseState s = state(true);
  s.restarts = s.policy.max_restarts;  // even with the budget spent: spares bound how often
  const Action a = decide(s, excluded(Blame::Failure, Hosts::SparesIn));
  EXPECT_EQ(a.kind, Kind::RelaunchOnSpares);
  EXPECT_EQ(after(s, a).restarts, s.restarts);
}

TEST(Decide, AFailureNoHostIsBlamedForIsRetriedOnTheSameHosts) {
  SuperviseState s = state(true);
  EXPECT_EQ(decide(s, excluded(Blame::Failure, Hosts::Unchanged)).kind, Kind::Restart);
  // Only spares went (a probe blamed one): the launch's failure is judged as any.
  EXPECT_EQ(decide(s, excluded(Blame::Failure, Hosts::SparesOnly)).kind, Kind::Restart);
  s.restarts = 3;
  expect_exit(decide(s, excluded(Blame::Failure, Hosts::Unchanged)), kExitGaveUp, Why::BudgetSpent);
}

TEST(Decide, NoSpareLeftGivesUpWith7) {
  Outcome o = excluded(Blame::Failure, Hosts::NoneLeft);
  o.usable = 1;
  expect_exit(decide(state(true), o), kExitGaveUp, Why::NoSpare);
}

TEST(Decide, NoSpareLeftShrinksWhenElasticAndASmallerJobFits) {
  SuperviseState s = state(true);
  s.policy.elastic = true;
  s.policy.spare_wait = 100;  // (elastic goes first)
  Outcome o = excluded(Blame::Failure, Hosts::NoneLeft);
  o.usable = 2, o.can_shrink = true;
  const Action a = decide(s, o);
  EXPECT_EQ(a.kind, Kind::Shrink);
  EXPECT_EQ(after(s, a).restarts, 0);  // not counted
  o.can_shrink = false;
  expect_exit(decide(s, o), kExitGaveUp, Why::ShrinkRefused);
  o.usable = 0;  // no host left at all: nothing to shrink to
  expect_exit(decide(s, o), kExitGaveUp, Why::NoSpare);
}

TEST(Decide, NoSpareLeftWaitsForHostsWithSpareWait) {
  SuperviseState s = state(true);
  s.policy.spare_wait = 60;
  Outcome o = excluded(Blame::Failure, Hosts::NoneLeft);
  o.usable = 1;
  EXPECT_EQ(decide(s, o).kind, Kind::WaitForHosts);
}

TEST(Decide, AHostComingBackRestartsCountedAndTheWaitOverGivesUp) {
  SuperviseState s = state(true);
  s.policy.spare_wait = 60;
  Outcome back{Outcome::Kind::WaitEnded};
  back.blame = Blame::Failure, back.job.code = 128 + 9, back.hosts_back = true;
  const Action a = decide(s, back);
  ASSERT_EQ(a.kind, Kind::Restart);  // counted: a host that comes and goes must not relaunch for ever
  EXPECT_EQ(after(s, a).restarts, 1);
  s.restarts = 3;
  expect_exit(decide(s, back), kExitGaveUp, Why::BudgetSpent);
  back.hosts_back = false;
  expect_exit(decide(state(true), back), kExitGaveUp, Why::WaitOver);
  // Back during the health check's exclusion: the launch goes ahead.
  back.blame = Blame::Health, back.hosts_back = true;
  EXPECT_EQ(decide(s, back).kind, Kind::Launch);
}

TEST(Decide, AStragglerIsSwappedOnceTheJobCheckpointedAndStopped) {
  Outcome o = job_ended(kExitPreempted);
  o.job.swap_asked = true;
  const Action a = decide(state(true), o);
  EXPECT_EQ(a.kind, Kind::ExcludeBlamed);
  EXPECT_EQ(a.blame, Blame::Swap);
  EXPECT_EQ(decide(state(true), excluded(Blame::Swap, Hosts::SparesIn, kExitPreempted)).kind, Kind::RelaunchOnSpares);
  // Its host unknown, nothing excluded: a restart after the backoff (the job stopped because we asked).
  EXPECT_EQ(decide(state(true), excluded(Blame::Swap, Hosts::Unchanged, kExitPreempted)).kind, Kind::Restart);
}

TEST(Decide, AStragglerSwapIsNotMadeWhenTheJobFailedOrAStopCame) {
  // The job failed meanwhile: judged as any failure.
  Outcome o = job_ended(128 + 9);
  o.job.swap_asked = true;
  Action a = decide(state(true), o);
  EXPECT_EQ(a.kind, Kind::ExcludeBlamed);
  EXPECT_EQ(a.blame, Blame::Failure);
  // A stop signal came to the supervisor: preempted, not swapped.
  o = job_ended(kExitPreempted);
  o.job.swap_asked = true, o.job.stop = true;
  expect_exit(decide(state(true), o), kExitPreempted, Why::Preempted);
  o.job.stop = false, o.job.forwarded = true;
  expect_exit(decide(state(true), o), kExitPreempted, Why::Preempted);
}

TEST(Decide, TheHealthCheckGatesTheLaunch) {
  const SuperviseState s = state(true);
  EXPECT_EQ(decide(s, health(kExitOk)).kind, Kind::Launch);
  // No verdict (a crash, a timeout): launch without it.
  const Action none = decide(s, health(kExitInternal));
  EXPECT_EQ(none.kind, Kind::Launch);
  EXPECT_EQ(none.why, Why::CheckFailed);
  // checkpoint.dir full on every host: no host to blame.
  expect_exit(decide(s, health(kExitNoSpace)), kExitNoSpace, Why::DiskFull);
  const Action unfit = decide(s, health(kExitUnfitNode));
  EXPECT_EQ(unfit.kind, Kind::ExcludeBlamed);
  EXPECT_EQ(unfit.blame, Blame::Health);
}

TEST(Decide, AFailedHealthCheckExcludesItsHostsOrRefusesToLaunch) {
  const SuperviseState s = state(true);
  EXPECT_EQ(decide(s, excluded(Blame::Health, Hosts::SparesIn)).kind, Kind::Launch);
  EXPECT_EQ(decide(s, excluded(Blame::Health, Hosts::SparesOnly)).kind, Kind::Launch);
  // Unfit and nothing it names can be excluded: not launching on it.
  expect_exit(decide(s, excluded(Blame::Health, Hosts::Unchanged)), kExitUnfitNode, Why::UnfitUnexcluded);
  Outcome none = excluded(Blame::Health, Hosts::NoneLeft);
  none.usable = 1;
  expect_exit(decide(s, none), kExitGaveUp, Why::NoSpare);
}

TEST(Decide, OnlyARestartIsCounted) {
  const SuperviseState s = state(true);
  for (Kind k : {Kind::Launch, Kind::ExcludeBlamed, Kind::RelaunchOnSpares, Kind::Shrink, Kind::WaitForHosts,
                 Kind::Exit})
    EXPECT_EQ(after(s, Action{k}).restarts, 0);
  EXPECT_EQ(after(s, Action{Kind::Restart}).restarts, 1);
}

TEST(Decide, RetryableFollowsTheReadmesExitCodes) {
  for (int code : std::vector<int>{kExitOk, kExitUsage, kExitData, kExitCheckpoint, kExitBadStep, kExitPreempted, kExitNoSpace,
                   kExitUnfitNode, 126, 127})
    EXPECT_FALSE(retryable(code)) << code;
  for (int code : std::vector<int>{kExitInternal, kExitCommTimeout, kExitGaveUp, 128 + 9, 128 + 11, 255}) EXPECT_TRUE(retryable(code)) << code;
  EXPECT_EQ(exit_code_meaning(127), "the launch command was not found");
  EXPECT_NE(exit_code_meaning(128 + 9).find("killed by signal 9"), std::string::npos);
}

}  // namespace
}  // namespace trainer
