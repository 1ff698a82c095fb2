#include "supervise/fleet.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "ckpt/checkpoint.h"
#include "report/run_files.h"
#include "runtime/errors.h"
#include "runtime/flight_recorder.h"
#include "runtime/replace_file.h"
#include "runtime/self_exe.h"
#include "runtime/shell_words.h"
#include "runtime/stop_signal.h"
#include "runtime/units.h"
#include "supervise/child_process.h"
#include "supervise/launch_command.h"

namespace trainer {

namespace {

double now_s() { return wall_seconds(); }

// How long a health check's launcher may outlive the verdict it recorded
// (mpirun may wait for a cut host's daemon for ever).
constexpr double kLauncherLinger = 15;

// `trainer health` on an excluded host beside the usable ones takes a few
// seconds; a launcher that hangs on a host still out of reach is stopped
// after this long.
constexpr double kCheckLimit = 30;

// "resuming from step N (the newest checkpoint, if it verifies)": the
// relaunch verifies it (reading every byte, which is its work, not the
// supervisor's) and falls back to an older one if it is broken.
std::string resume_point(const std::string& checkpoint_dir, long* step) {
  const std::string latest = latest_checkpoint(checkpoint_dir);
  *step = latest.empty() ? 0 : checkpoint_step(latest);
  return latest.empty() ? std::string("the start (no checkpoint yet)")
                        : "step " + std::to_string(*step) + " (the newest checkpoint, if it verifies)";
}

}  // namespace

Diagnosis health_verdict(const std::string& run_dir, int launch) {
  Diagnosis d;
  for (const nlohmann::json& e : read_jsonl(run_dir + "/events.jsonl")) {
    if (events::head(e).launch != launch) continue;
    if (events::is<events::HealthCheck>(e)) d = {};
    // (a damaged entry, not readable as one, changes nothing)
    if (const std::optional<events::UnfitNode> u = events::read<events::UnfitNode>(e))
      d.hosts = u->hosts, d.host_why = u->why;
  }
  return d;
}

Fleet::Fleet(const Recipe& r, EventLog& events, Allocation alloc, int ranks, std::string recipe_path,
             std::vector<std::string> overrides)
    : r_(r), events_(events), alloc_(std::move(alloc)), full_ranks_(ranks), full_nodes_(alloc_.nodes()),
      recipe_path_(std::move(recipe_path)), overrides_(std::move(overrides)) {}

std::vector<std::string> Fleet::job_overrides(std::vector<std::string> o) const {
  if (!shrunk_) return o;
  const Recipe& n = shrunk_->recipe;
  o.push_back("parallel.dp=" + std::to_string(n.parallel.grid.dp));
  o.push_back("launch.nodes=" + std::to_string(n.launch.nodes));
  if (r_.launch.ranks > 0) o.push_back("launch.ranks=" + std::to_string(n.launch.ranks));
  return o;
}

Fleet::HealthCheck Fleet::check(int launch) {
  const std::vector<std::string> usable = alloc_.usable();
  const std::vector<std::string> cmd =
      launch_command(r_, "health", recipe_path_, overrides_, (int)usable.size(), usable, launch);
  events_.write(launch,
                "before launch " + std::to_string(launch) + ": trainer health on the " + std::to_string(usable.size()) +
                    " usable host(s): " + shell_join(cmd),
                events::HealthCheck{.hosts = usable, .command = shell_join(cmd)});
  const double t0 = now_s();
  // Its limit: hang_timeout (900 s when off): a host that cannot start
  // holds up mpirun, and the launch after then finds it (start_timeout).
  // A verdict already recorded (a host cut off mid-check, named by the
  // others) ends the wait kLauncherLinger s later.
  double verdict_at = 0;
  auto lingering = [&] {
    if (verdict_at == 0 && !health_verdict(r_.run.dir, launch).hosts.empty()) verdict_at = now_s();
    return verdict_at > 0 && now_s() - verdict_at > kLauncherLinger;
  };
  const ChildEnd end = wait_children({spawn(cmd, launch_environment(launch, ""))},
                                     r_.supervisor.hang_timeout > 0 ? r_.supervisor.hang_timeout : 900, cmd[0],
                                     lingering)[0];
  if (end.stopped) return {0, true};
  char took[64];
  std::snprintf(took, sizeof took, " after %.1f s", now_s() - t0);
  if (end.over)
    events_.write<events::Lingering>(launch, std::string("trainer health recorded its verdict and its launcher was still "
                                                   "running (waiting on a host it lost?)") + took + ": stopped it");
  const int code = end.over ? kExitUnfitNode : end.code;
  if (code == kExitOk) events_.write<events::HealthOk>(launch, "every usable host is fit" + std::string(took));
  else if (code == kExitNoSpace)  // the checkpoint directory's disk, on every node: no host to blame
    events_.write(launch,
                  std::string("trainer health: checkpoint.dir cannot take a checkpoint on any host (its output "
                              "says why)") + took + "; not launching into it, no host excluded",
                  events::DiskFull{.code = code});
  else if (code != kExitUnfitNode)
    events_.write(launch,
                  "trainer health exited with code " + std::to_string(code) + " (" +
                      (end.timed_out ? std::string("no answer in time") : exit_code_meaning(code)) + ")" + took +
                      ": launching without its verdict",
                  events::HealthFailed{.code = code});
  return {code, false};
}

// When the supervisor stopped the launch at start_timeout, the hosts whose
// ranks never started while others' did (not after any failure: a host
// still starting when another failed fast would be blamed); when no host's
// started (mpirun starts every host's ranks or none) and no step finished,
// the hosts on which a launch of `trainer version` alone fails while it runs
// on another of `probed` (with launch.nodes = 1 the spares are the others;
// a spare where it fails is excluded too).
Diagnosis Fleet::start_verdict(int launch, const LaunchEnd& o, const std::vector<std::string>& probed) {
  Diagnosis d;
  if (o.marks.empty()) return d;
  const StartMarks m = read_marks(o.marks, o.hosts);
  if (m.marked > 0) {
    if (o.unstarted && m.named && !m.missing.empty()) {
      d.hosts = m.missing;
      d.host_why = "its ranks never started (the other hosts' did)";
    }
    return d;
  }
  if (mtime_seconds(r_.run.dir + "/heartbeat") > o.t0) return d;  // a step finished: every rank started
  const std::vector<std::string> failed = probe_hosts(launch, probed, o.marks);
  if (!failed.empty() && failed.size() < probed.size()) {
    d.hosts = failed;  // a spare among them had no ranks in the launch: the why names the probe
    d.host_why = "`trainer version` launched on it alone failed where it ran on another host (no rank of "
                 "launch " + std::to_string(launch) + " started on any host)";
  }
  return d;
}

// Launches `trainer version` on each host alone (up to 32 at once), each
// given start_timeout; returns the hosts where it failed or did not finish.
// An event lists every result; each probe's output is in
// MARKS/probe_HOST.log.
std::vector<std::string> Fleet::probe_hosts(int launch, const std::vector<std::string>& hosts,
                                            const std::string& marks) {
  std::vector<std::string> failed, results;
  for (size_t first = 0; first < hosts.size() && !stop_signal(); first += 32) {
    std::vector<pid_t> pids;
    const size_t last = std::min(hosts.size(), first + 32);
    for (size_t i = first; i < last; i++) {
      std::vector<std::string> cmd = launcher_prefix(r_, 1, {hosts[i]}, true);
      cmd.insert(cmd.end(), {self_executable(), "version"});
      pids.push_back(spawn(cmd, launch_environment(launch, ""), marks + "/probe_" + hosts[i] + ".log"));
    }
    const std::vector<ChildEnd> ends = wait_children(pids, r_.supervisor.start_timeout, r_.launch.launcher);
    for (size_t i = first; i < last; i++) {
      const ChildEnd& e = ends[i - first];
      char b[64];
      std::snprintf(b, sizeof b, "no answer in %.0f s", r_.supervisor.start_timeout);  // the wait's own limit
      const std::string result = e.stopped     ? "stopped (a stop signal)"
                                 : e.timed_out ? std::string(b)
                                 : e.code != 0 ? "exit " + std::to_string(e.code)
                                               : "ok";
      if (result != "ok" && !e.stopped) failed.push_back(hosts[i]);
      results.push_back(hosts[i] + ": " + result);
    }
  }
  events_.write(launch,
                "launch " + std::to_string(launch) + ": no rank started on any host; `trainer version` on each "
                "alone: " + join(results) + " (output: " + marks + "/probe_HOST.log)",
                events::StartProbe{.failed = failed, .results = results});
  return failed;
}

Fleet::Exclusion Fleet::exclude(int launch, const Diagnosis& d, const std::vector<std::string>& among,
                                const std::vector<std::string>& used) {
  Exclusion x;
  std::vector<std::string> unknown;
  for (const std::string& name : d.hosts) {
    const std::string h = alloc_.find(name);
    if (h.empty()) unknown.push_back(name);
    else if (std::find(among.begin(), among.end(), h) != among.end() && alloc_.exclude(h, d.host_why)) x.out.push_back(h);
  }
  if (!unknown.empty())
    events_.write(launch,
                  "the failure is blamed on " + join(unknown) + " (" + d.host_why +
                      "), which is not one of the allocation's hosts (" + join(alloc_.hosts()) +
                      "): nothing excluded for it; name the hosts in launch.hosts or the hostfile as their "
                      "`hostname` does",
                  events::UnknownHost{.hosts = unknown, .why = d.host_why});
  if (x.out.empty()) return x;  // unattributed: retried on the same hosts
  const std::vector<std::string> next = alloc_.launch_hosts();
  for (const std::string& h : next)
    if (std::find(used.begin(), used.end(), h) == used.end()) x.spares_in.push_back(h);
  x.usable = (int)alloc_.usable().size();
  x.rec.excluded = x.out, x.rec.why = d.host_why, x.rec.spares_in = x.spares_in, x.rec.hosts = next;
  x.rec.spares_left = next.empty() ? std::vector<std::string>{} : alloc_.spares();
  x.said = "host" + std::string(x.out.size() > 1 ? "s " : " ") + join(x.out) + " excluded: " + d.host_why;
  if (!next.empty() && x.spares_in.empty()) {
    // Only spares were excluded (by a check before a launch, or a probe):
    // the launch's hosts stay as they were.
    x.hosts = Outcome::Hosts::SparesOnly;
    events_.write(launch, x.said + "; a spare, so the launch keeps its hosts (" + join(next) + ")",
                  events::Replace{x.rec});
    return x;
  }
  if (next.empty()) {
    x.hosts = Outcome::Hosts::NoneLeft;
    if (r_.supervisor.elastic && x.usable > 0) {
      // The most hosts that make a valid job (the others wait as spares).
      x.shrink = shrink_job(r_, full_ranks_, full_nodes_, x.usable, r_.runtime.memory_check);
      for (int n = x.usable - 1; !x.shrink->ok && n >= 1; n--)
        if (Shrink t = shrink_job(r_, full_ranks_, full_nodes_, n, r_.runtime.memory_check); t.ok) x.shrink = std::move(t);
    }
    return x;
  }
  x.hosts = Outcome::Hosts::SparesIn;
  long step = 0;
  const std::string from = resume_point(r_.checkpoint.dir, &step);
  x.rec.resume_step = step;
  events_.write(launch,
                x.said + "; spare" + std::string(x.spares_in.size() > 1 ? "s " : " ") + join(x.spares_in) +
                    " in; resuming from " + from + " on " + join(next),
                events::Replace{x.rec});
  return x;
}

void Fleet::say_no_spare(int launch, const Exclusion& x, Action::Why why) {
  events::NoSpare rec{x.rec};
  if (why == Action::Why::ShrinkRefused) {
    rec.shrink_refused = x.shrink->why;
    events_.write(launch,
                  x.said + "; no spare left, and the job cannot shrink to the " + std::to_string(x.usable) +
                      " usable host(s) (supervisor.elastic): " + x.shrink->why +
                      "; giving up; give the job more hosts and run the same command to resume",
                  rec);
    return;
  }
  events_.write(launch,
                x.said + "; no spare left (" + std::to_string(x.usable) + " usable host(s), launch.nodes = " +
                    std::to_string(alloc_.nodes()) + (r_.supervisor.elastic ? "" : "; supervisor.elastic = false") +
                    "): giving up; give the job more hosts and run the same command to resume",
                rec);
}

void Fleet::shrink(int launch, Exclusion x) {
  Shrink& s = *x.shrink;
  const GridShape& g = r_.parallel.grid;
  const int dp_was = shrunk_ ? shrunk_->recipe.parallel.grid.dp : full_ranks_ / (int)g.model_ranks();
  alloc_.shrink(s.nodes);
  const std::vector<std::string> next = alloc_.launch_hosts();
  long step = 0;
  const std::string from = resume_point(r_.checkpoint.dir, &step);
  const Recipe& n = s.recipe;
  x.rec.hosts = next, x.rec.nodes = s.nodes, x.rec.ranks = s.ranks, x.rec.dp = n.parallel.grid.dp;
  x.rec.accum_steps = n.accum_steps(), x.rec.resume_step = step;
  char b[256];
  std::snprintf(b, sizeof b,
                "; no spare left: shrinking to %d node(s) (supervisor.elastic): %d ranks, dp %d -> %d, %d "
                "micro-batches per replica per step (global batch %ld unchanged); resuming from ",
                s.nodes, s.ranks, dp_was, n.parallel.grid.dp, n.accum_steps(), (long)n.training.global_batch);
  events_.write(launch, x.said + b + from + " on " + join(next), events::ShrinkEvent{x.rec});
  shrunk_ = std::move(s);
}

// `trainer health` on each excluded host in turn beside the usable ones
// (one rank each, so that its figures are judged against theirs): the
// excluded hosts found fit. A host that cannot start its rank fails its own
// check only, and a launcher that hangs on it is stopped after kCheckLimit
// s, so one still out of reach keeps no other out. Each check within
// `until`, and at least a few seconds (the wait's last round may overrun it
// by those).
std::vector<std::string> Fleet::fit_again(int launch, double until) {
  const std::vector<std::string> usable = alloc_.usable();
  const std::map<std::string, std::string> excluded = alloc_.excluded();
  std::vector<std::string> fit;
  for (const auto& [h, why] : excluded) {
    if (stop_signal()) break;
    std::vector<std::string> hosts;  // in the allocation's order
    for (const std::string& a : alloc_.hosts())
      if (a == h || std::find(usable.begin(), usable.end(), a) != usable.end()) hosts.push_back(a);
    const std::vector<std::string> cmd =
        launch_command(r_, "health", recipe_path_, overrides_, (int)hosts.size(), hosts, launch);
    events_.write(launch,
                  "waiting for hosts: trainer health on excluded host " + h + " beside the " +
                      std::to_string(usable.size()) + " usable host(s): " + shell_join(cmd),
                  events::HealthCheck{.host = h, .hosts = hosts, .command = shell_join(cmd)});
    const double cap = std::max(kCheckLimit, r_.supervisor.spare_check_every);
    const double limit = std::max(5.0, std::min(until - now_s(), cap));
    const ChildEnd end = wait_children({spawn(cmd, launch_environment(launch, ""))}, limit, cmd[0])[0];
    if (end.stopped) break;
    if (end.code != kExitOk && end.code != kExitUnfitNode) {
      events_.write(launch,
                    "trainer health with " + h + " reached no verdict (" +
                        (end.timed_out ? std::string("no answer in time") : "exit " + std::to_string(end.code)) +
                        "): it is still out of reach",
                    events::HealthFailed{.host = h, .code = end.code});
      continue;
    }
    if (end.code == kExitUnfitNode) {
      // Fit only when the verdict names hosts of the allocation, h not
      // among them (a verdict naming none, or an unknown one, clears none).
      const Diagnosis d = health_verdict(r_.run.dir, launch);
      bool cleared = !d.hosts.empty();
      for (const std::string& name : d.hosts)
        if (const std::string a = alloc_.find(name); a.empty() || a == h) cleared = false;
      if (!cleared) continue;
    }
    fit.push_back(h);
  }
  return fit;
}

Fleet::Wait Fleet::wait_for_hosts(int launch, const Exclusion& x) {
  const SupervisorSection& sv = r_.supervisor;
  const double t0 = now_s(), until = t0 + sv.spare_wait;
  const int left = (int)alloc_.usable().size();
  char b[320];
  std::snprintf(b, sizeof b,
                "; no spare left (%d usable host(s), launch.nodes = %d): waiting up to %g s (supervisor.spare_wait) "
                "for hosts to come back, with trainer health on each excluded one every %g s%s",
                left, alloc_.nodes(), sv.spare_wait, sv.spare_check_every,
                sv.readmit ? " (readmitted when fit: supervisor.readmit)"
                           : "; supervisor.readmit = false: none of them returns, so only the end of the wait");
  events::NoSpare rec{x.rec};
  rec.wait_s = sv.spare_wait;
  events_.write(launch, x.said + b, rec);
  std::set<std::string> said;
  for (;;) {
    for (const double next = std::min(until, now_s() + sv.spare_check_every); now_s() < next;) {
      if (stop_signal()) return {true, false};
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // Each check within the wait (a launcher that hangs on a dead host is
    // stopped at its end).
    const std::vector<std::string> fit = fit_again(launch, until);
    if (stop_signal()) return {true, false};
    for (const std::string& h : fit) {
      if (sv.readmit) {
        alloc_.readmit(h);
        events_.write(launch,
                      "host " + h + " passes trainer health again: back in the allocation (supervisor.readmit), " +
                          std::to_string((int)(now_s() - t0)) + " s into the wait",
                      events::Readmit{.host = h, .waited_s = now_s() - t0});
      } else if (said.insert(h).second) {
        events_.write(launch,
                      "host " + h + " passes trainer health again; supervisor.readmit = false keeps it out",
                      events::FitAgain{.host = h});
      }
    }
    if (!alloc_.launch_hosts().empty()) return {false, true};
    if (now_s() >= until) break;
  }
  std::string out;
  for (const auto& [h, why] : alloc_.excluded()) out += (out.empty() ? "" : "; ") + h + " (" + why + ")";
  const int usable = (int)alloc_.usable().size(), back = usable - left;  // back: readmitted in the wait
  std::string came = back > 0 ? std::to_string(back) + " came back, too few" : "none came back";
  if (!sv.readmit)
    came = said.empty() ? came + " (supervisor.readmit = false)"
                        : std::to_string(said.size()) + " passed trainer health but stay(s) out (supervisor.readmit = false)";
  events_.write(launch,
                "waited " + std::to_string((int)(now_s() - t0)) + " s (supervisor.spare_wait = " +
                    std::to_string((int)sv.spare_wait) + " s) for " + std::to_string(alloc_.nodes() - usable) +
                    " more host(s) to run launch.nodes = " + std::to_string(alloc_.nodes()) + " (" +
                    std::to_string(usable) + " usable; excluded: " + out + "): " + came +
                    "; giving up; give the job more hosts and run the same command to resume",
                events::GiveUp{.code = kExitGaveUp, .waited_s = now_s() - t0});
  return {false, false};
}

}  // namespace trainer
