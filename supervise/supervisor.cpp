#include "supervise/supervisor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "report/run_files.h"
#include "runtime/errors.h"
#include "runtime/flight_recorder.h"
#include "runtime/shell_words.h"
#include "runtime/stop_signal.h"
#include "runtime/units.h"
#include "supervise/decide.h"
#include "supervise/diagnosis.h"
#include "supervise/event_log.h"
#include "supervise/fleet.h"
#include "supervise/launch_command.h"
#include "supervise/launcher.h"
#include "supervise/straggler_policy.h"

namespace trainer {

namespace {

double now_s() { return wall_seconds(); }

class Supervisor {
 public:
  Supervisor(const Recipe& r, const SuperviseJob& job, std::optional<Allocation> alloc, EventLog& events)
      : r_(r), job_(job), events_(events), stragglers_(r, events), launcher_(r, events) {
    full_ranks_ = r.launch.ranks > 0 ? r.launch.ranks : r.parallel.grid.ranks();
    state_.policy = r.supervisor;
    state_.allocation = alloc.has_value();
    if (alloc) fleet_.emplace(r, events, std::move(*alloc), full_ranks_, job.recipe_path, job.overrides);
  }

  int run();

 private:
  int health_check(int launch);
  Action exclude(int launch, Blame blame, const Diagnosis& d, const std::vector<std::string>& among,
                 const std::vector<std::string>& used, const JobExit& job);
  Diagnosis report(int launch, const LaunchEnd& o);
  int finish(int launch, const Action& a, const JobExit& job);
  int stopped(int launch, const std::string& where);
  bool back_off(int launch, const Action& a);

  const Recipe& r_;
  const SuperviseJob& job_;
  EventLog& events_;
  std::optional<Fleet> fleet_;  // with an allocation
  StragglerPolicy stragglers_;
  Launcher launcher_;
  SuperviseState state_;
  int full_ranks_ = 0;
};

// A stop signal while no job ran: nothing launched, the requeue code.
int Supervisor::stopped(int launch, const std::string& where) {
  const Action a = decide(state_, Outcome(Outcome::Kind::Stop));
  const int sig = stop_signal();
  events_.write<events::Preempted>(launch, std::string(sig ? strsignal(sig) : "a stop signal") + " received " + where +
                                         "; exiting with " + std::to_string(a.code) +
                                         " so the scheduler can requeue it");
  return a.code;
}

// health.check with an allocation: before each launch `trainer health`
// measures every usable host, one rank each (the spares too, so that none
// takes the place of a host while unfit itself), and the hosts it finds
// unfit are excluded. Returns -1 to launch, or the supervisor's exit code.
int Supervisor::health_check(int launch) {
  const std::vector<std::string> planned = fleet_->allocation().launch_hosts(), usable = fleet_->allocation().usable();
  const Fleet::HealthCheck h = fleet_->check(launch);
  if (h.stopped) return stopped(launch, "during the health check; nothing launched");
  Outcome o{Outcome::Kind::HealthChecked};
  o.code = h.code;
  Action a = decide(state_, o);
  // Unfit: exclude the hosts it names; one it found unfit and that cannot
  // be excluded (no event, a name outside the allocation) stops the run as
  // the job's own check would (the job runs with that check off).
  if (a.kind == Action::Kind::ExcludeBlamed)
    a = exclude(launch, Blame::Health, fleet_->check_verdict(launch), usable, planned, {});
  if (a.kind == Action::Kind::Exit) return finish(launch, a, {});
  // (came as the check ended: it may have ended the check)
  if (stop_signal()) return stopped(launch, "during the health check; nothing launched");
  return -1;
}

// The hosts `d` blames excluded, and what decide() makes of what that left,
// carried out as far as the next launch: a shrink, a wait for hosts.
Action Supervisor::exclude(int launch, Blame blame, const Diagnosis& d, const std::vector<std::string>& among,
                           const std::vector<std::string>& used, const JobExit& job) {
  Fleet::Exclusion x = fleet_->exclude(launch, d, among, used);
  Outcome o{Outcome::Kind::HostsExcluded};
  o.blame = blame, o.job = job, o.hosts = x.hosts, o.usable = x.usable;
  o.can_shrink = x.shrink && x.shrink->ok;
  Action a = decide(state_, o);
  if (a.kind == Action::Kind::Shrink) {
    fleet_->shrink(launch, std::move(x));
    stragglers_.forget_ranks();  // the ranks they moved are numbered otherwise now
  } else if (a.kind == Action::Kind::WaitForHosts) {
    const Fleet::Wait w = fleet_->wait_for_hosts(launch, x);
    if (w.stopped) return {Action::Kind::Exit, stopped(launch, "while waiting for hosts; nothing launched")};
    Outcome back{Outcome::Kind::WaitEnded};
    back.blame = blame, back.job = job, back.hosts_back = w.hosts_back;
    a = decide(state_, back);
  } else if (a.why == Action::Why::NoSpare || a.why == Action::Why::ShrinkRefused) {
    fleet_->say_no_spare(launch, x, a.why);
  }
  return a;
}

// The exit event; after a failure, who crashed (crash reports) and who was
// behind (flight recorders), which the diagnosis returned says.
Diagnosis Supervisor::report(int launch, const LaunchEnd& o) {
  const std::string what = o.hung        ? "hung, killed"
                           : o.unstarted ? "not started on every host, stopped"
                                         : exit_code_meaning(o.code);
  char b[256];
  std::snprintf(b, sizeof b, "launch %d exited with code %d (%s) after %.1f s", launch, o.code, what.c_str(),
                now_s() - o.t0);
  events_.write(launch, b,
                events::Exit{.code = o.code,
                             .seconds = now_s() - o.t0,
                             .meaning = o.hung        ? std::string("hang")
                                        : o.unstarted ? std::string("not started")
                                                      : exit_code_meaning(o.code)});
  if (o.code == kExitOk) return {};
  const Diagnosis d = diagnose_run(r_.run.dir, o.t0);
  for (const CrashReport& c : d.crashes)
    events_.write(launch, "launch " + std::to_string(launch) + ": " + c.summary + " (backtrace: " + c.path + ")",
                  events::Crash{.rank = c.rank, .summary = c.summary, .file = c.path});
  if (d.dumps > 0)
    events_.write(launch,
                  "launch " + std::to_string(launch) + ": " + d.verdict + (d.culprit.empty() ? "" : " " + d.culprit) +
                      " (the whole report: trainer diagnose " + r_.run.dir + ")",
                  events::Diagnosis{.verdict = d.verdict, .culprit = d.culprit, .report = d.report});
  return d;
}

// The event an exit is said with, where its cause did not say it already;
// returns the exit code.
int Supervisor::finish(int launch, const Action& a, const JobExit& job) {
  using Why = Action::Why;
  switch (a.why) {
    case Why::Done:
      events_.write<events::Done>(launch, "training finished after " + std::to_string(launch + 1) + " launch(es)");
      break;
    case Why::Paused: {
      const long at = read_heartbeat_step(r_.run.dir);
      events_.write(launch,
                    "the job stopped at step " + std::to_string(at) + " of " + std::to_string(r_.training.steps) +
                        " (training.exit_after = " + std::to_string(r_.training.exit_after) +
                        "); the same command continues from its checkpoint",
                    events::Paused{.step = at});
      break;
    }
    case Why::Preempted:
      events_.write<events::Preempted>(launch, "the job stopped on a signal; exiting with " + std::to_string(kExitPreempted) +
                                             " so the scheduler can requeue it");
      break;
    case Why::NotRetryable:
      events_.write(launch, "not restarting: " + exit_code_meaning(job.code) + " (exit " +
                                           std::to_string(job.code) +
                                           ") is not something a restart can fix; see the job's messages above",
                    events::GiveUp{.code = job.code});
      break;
    case Why::BudgetSpent:
      events_.write(launch, "giving up: the job failed " + std::to_string(state_.restarts + 1) +
                                           " time(s) and supervisor.max_restarts = " +
                                           std::to_string(r_.supervisor.max_restarts) +
                                           " restarts are used up; the last failure: " + exit_code_meaning(job.code),
                    events::GiveUp{.code = job.code});
      break;
    case Why::UnfitUnexcluded:
      events_.write(launch, "trainer health found a node unfit and named no host that can be excluded; not "
                                       "launching on it (take the node out of the allocation, or health.check = false)",
                    events::GiveUp{.code = a.code});
      break;
    default: break;  // said where it arose: no_spare, give_up after the wait, disk_full, preempted
  }
  return a.code;
}

// Waits out the backoff before the next launch; false if a stop signal
// came. A launch on spares that replaced the hosts at fault starts at once
// and is not counted against max_restarts (the spares bound how often).
bool Supervisor::back_off(int launch, const Action& a) {
  const SupervisorSection& sv = r_.supervisor;
  const bool replaced = a.kind != Action::Kind::Restart;  // on spares, or the smaller job on the hosts left
  state_ = after(state_, a);
  char b[200];
  if (replaced)
    std::snprintf(b, sizeof b, "relaunching at once on the new hosts, from the newest valid checkpoint (not counted "
                               "as a restart: %d of %d used)", state_.restarts, sv.max_restarts);
  else
    std::snprintf(b, sizeof b, "restart %d of %d in %.1f s, from the newest valid checkpoint", state_.restarts,
                  sv.max_restarts, a.delay_s);
  // on_spares 1: a relaunch on spares (trainer status counts it apart)
  events_.write(launch + 1, b,
                events::Restart{.restart = state_.restarts, .delay_s = a.delay_s, .on_spares = replaced ? 1 : 0});
  for (const double until = now_s() + a.delay_s; now_s() < until;) {
    if (stop_signal()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

int Supervisor::run() {
  if (fleet_) {
    const Allocation& a = fleet_->allocation();
    events_.write(0,
                  std::to_string(a.hosts().size()) + " host(s): " + join(a.hosts()) + "; each launch runs on " +
                      std::to_string(a.nodes()) + ", spares: " + (a.spares().empty() ? "none" : join(a.spares())),
                  events::Allocation{.hosts = a.hosts(), .spares = a.spares(), .nodes = a.nodes()});
  }
  // The supervisor's health check stands for the job's own.
  std::vector<std::string> overrides = job_.overrides;
  if (fleet_ && r_.health.check) overrides.push_back("health.check=false");
  for (int launch = 0;; launch++) {
    // (came before this launch; the backoff watches for it too)
    if (stop_signal()) return stopped(launch, "before launch " + std::to_string(launch) + "; nothing started");
    if (fleet_ && r_.health.check)
      if (const int code = health_check(launch); code >= 0) return code;
    const std::vector<std::string> hosts = fleet_ ? fleet_->allocation().launch_hosts() : std::vector<std::string>{};
    const int ranks = fleet_ ? fleet_->ranks() : full_ranks_;
    const std::vector<std::string> command =
        job_.command.empty()
            ? launch_command(r_, "train", job_.recipe_path, fleet_ ? fleet_->job_overrides(overrides) : overrides,
                             ranks, hosts, launch)
            : job_.command;
    const LaunchEnd e = launcher_.run(launch, command, hosts, fleet_ ? &fleet_->allocation() : nullptr, ranks,
                                      fleet_ ? fleet_->grid() : r_.parallel.grid, stragglers_);
    Diagnosis d = report(launch, e);
    Outcome o{Outcome::Kind::JobEnded};
    o.job.code = e.code, o.job.forwarded = e.forwarded != 0, o.job.stop = stop_signal() != 0;
    o.job.swap_asked = e.swap.has_value();
    // training.exit_after ends a launch early by request: not finished.
    if (const long at = read_heartbeat_step(r_.run.dir); r_.training.exit_after > 0 && at >= 0 && at < r_.training.steps)
      o.job.stopped_early = true;
    Action a = decide(state_, o);
    // With an allocation, the hosts a failure is blamed on are replaced by
    // spares; a straggler the supervisor stopped the job for is swapped.
    if (a.kind == Action::Kind::ExcludeBlamed) {
      const std::vector<std::string> usable = fleet_->allocation().usable();  // the probes may blame a spare too
      if (a.blame == Blame::Swap) {
        d = {};
        d.hosts = {e.swap->host}, d.host_why = e.swap->why;
        const long last = read_heartbeat_step(r_.run.dir);
        a = exclude(launch, Blame::Swap, d, usable, hosts, o.job);
        std::vector<std::string> spares_in;
        for (const std::string& h : fleet_->allocation().launch_hosts())
          if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) spares_in.push_back(h);
        if (a.kind != Action::Kind::Exit)
          stragglers_.swapped(*e.swap, launch, last, spares_in, a.kind == Action::Kind::RelaunchOnSpares);
      } else {
        if (d.hosts.empty()) d = fleet_->start_verdict(launch, e, usable);
        a = exclude(launch, Blame::Failure, d, usable, hosts, o.job);
      }
    }
    if (a.kind == Action::Kind::Exit) return finish(launch, a, o.job);
    if (!back_off(launch, a)) return stopped(launch, "while waiting to restart");
  }
}

}  // namespace

int supervise(const Recipe& r, const SuperviseJob& job, std::optional<Allocation> alloc) {
  EventLog events(r.run.dir + "/events.jsonl");
  return Supervisor(r, job, std::move(alloc), events).run();
}

}  // namespace trainer
