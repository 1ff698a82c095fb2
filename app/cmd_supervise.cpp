// `trainer supervise RECIPE.toml`: launches the training job, watches it, and
// relaunches it from the newest valid checkpoint when it crashes or hangs.
// The supervisor never initialises MPI: it is a plain parent process of the
// launcher (mpirun or srun), so it outlives every failure of the job.
//
// Decisions come from the job's exit code (runtime/errors.h): 0 is done; a
// recipe, data, checkpoint or NaN error cannot be fixed by retrying; 75 means
// the job was preempted and saved a checkpoint (the supervisor exits 75 too,
// so the batch script can requeue); anything else (a crash, a signal, a
// watchdog timeout) is retried with backoff up to supervisor.max_restarts.
// A job whose rank 0 has not touched <run.dir>/heartbeat for
// supervisor.hang_timeout seconds is killed and retried like a crash.
//
// With an allocation (launch.hosts, launch.hostfile, or under Slurm the
// job's nodes when launch.nodes picks from them; cluster/allocation.h) each
// launch goes to launch.nodes hosts that are not excluded, all of them or
// none; a failure the flight recorders or crash reports blame on a host
// (app/diagnosis.h), the job's health check, or a host whose ranks never
// started excludes that host for the rest of the run, and the next launch
// takes a spare at once and resumes from the newest checkpoint. With
// supervisor.on_straggler = "replace", a host the job's straggler reports
// name supervisor.straggler_windows reports in a row is swapped for a spare
// before it fails: the job is asked to checkpoint and stop (the preemption
// path), the host excluded, and the run resumes on the spare. When the
// ranks it swapped are named again on their new host, the slowness is
// theirs, not a host's: that is reported, and not swapped again.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "app/child_process.h"
#include "app/commands.h"
#include "app/diagnosis.h"
#include "app/supervise_hosts.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "app/resume.h"
#include "app/shell_words.h"
#include "ckpt/checkpoint.h"
#include "cluster/allocation.h"
#include "cluster/straggler_streak.h"
#include "parallel/process_grid.h"
#include "planning/shrink.h"
#include "report/run_files.h"
#include "runtime/errors.h"
#include "runtime/self_exe.h"
#include "runtime/flight_recorder.h"
#include "runtime/host_name.h"
#include "runtime/metrics.h"
#include "runtime/regular_file.h"
#include "runtime/replace_file.h"
#include "runtime/stop_signal.h"
#include "runtime/units.h"

namespace trainer {

namespace {

const char* kSuperviseUsage =
    "usage: trainer supervise RECIPE.toml [--set section.key=value ...] [-- LAUNCH COMMAND...]\n"
    "  Runs the training job and restarts it from the newest valid checkpoint when it\n"
    "  crashes or hangs, up to [supervisor] max_restarts times, waiting [supervisor]\n"
    "  backoff seconds (doubling, at most backoff_max) before each restart.\n"
    "  The job is `mpirun -np N` or `srun --mpi=pmix -n N` (from [launch]: launcher, ranks,\n"
    "  args) of `trainer train RECIPE.toml` with the same --set overrides, or the command\n"
    "  after `--`. Every launch gets TRAINER_RESUME=auto (resume from the newest valid\n"
    "  checkpoint) and TRAINER_ATTEMPT=<launch number> in its environment.\n"
    "  A hang: rank 0 touches <run.dir>/heartbeat after every step; no touch for\n"
    "  [supervisor] hang_timeout seconds and the job is killed and restarted (after a\n"
    "  SIGUSR2 that makes every rank write its flight recorder).\n"
    "  SIGTERM, SIGUSR1 or Ctrl-C: the job checkpoints and stops; the supervisor exits 75.\n"
    "  Events: <run.dir>/events.jsonl and the console; after a failed launch, what its\n"
    "  ranks left is summarised too: `crash` (a rank that died of a signal, with its\n"
    "  backtrace file) and `diagnosis` (the flight recorders' verdict, as `trainer diagnose`).\n"
    "  Hosts: with [launch] hosts or hostfile, or under Slurm (SLURM_JOB_NODELIST) with [launch]\n"
    "  nodes set, each launch runs on `nodes` of the allocation's hosts (mpirun --host,\n"
    "  srun --nodelist; a relaunch with srun --overlap) and the rest are spares: a failure\n"
    "  blamed on a host (its link down, no other host reaching it, or a SIGBUS/SIGILL on it)\n"
    "  excludes that host, and the next launch takes a spare at once (event `replace`; not\n"
    "  counted against max_restarts); so does a host where no rank started within\n"
    "  [supervisor] start_timeout seconds while others' did (when none did: where `trainer\n"
    "  version` launched on it alone fails). With health.check = true, `trainer health` runs\n"
    "  on every usable host (spares too) before each launch instead of in the job, and the\n"
    "  hosts it finds unfit are excluded.\n"
    "  Stragglers: with an allocation and [supervisor] on_straggler = \"replace\", a host the job's\n"
    "  straggler reports (runtime.straggler_factor, every runtime.straggler_every steps) name in\n"
    "  straggler_windows reports in a row is swapped for a spare before it fails: the job checkpoints\n"
    "  and stops, the host is excluded, the run resumes on the spare (events `straggler_swap`,\n"
    "  `replace`, and `swap_done` with what the swap cost); without a spare it is only reported.\n"
    "  A rank still slow on its new host after such a swap is reported (`straggler_follows_rank`)\n"
    "  and not swapped again: its share of the work is slow, which a spare does not cure.\n"
    "  No spare left: exit 7; with [supervisor] elastic = true the job goes on on the hosts left\n"
    "  with fewer data-parallel replicas and the same global batch (event `shrink`), unless\n"
    "  that layout is invalid or would not fit memory (exit 7 with the reason); with\n"
    "  [supervisor] spare_wait > 0 it waits that long for hosts to come back (`trainer health`\n"
    "  on each excluded host beside the usable ones every spare_check_every s; with readmit =\n"
    "  true the excluded hosts it finds fit return, between launches only) before exit 7. The\n"
    "  shrink's memory check is the pre-flight's estimate against the memory of the machine\n"
    "  `supervise` runs on (`trainer plan --nodes N` shows it, or against --memory-per-rank-gb).\n"
    "  Exit: 0 done; 2, 3, 4, 6, 8, 10 the job's error that a retry cannot fix; 7 restart\n"
    "  budget used up, or no spare left; 75 preempted (requeue).\n";

double now_s() { return wall_seconds(); }

// How long a launcher may outlive the watchdog that ended its job; when the
// watchdogs' network probes found a host unreached or a link down, it waits
// on that host's daemon, and nothing more will come of it.
constexpr double kLauncherLinger = 15, kLostHostLinger = 3;

// What an exit code means, for the event log and the console.
std::string meaning(int code) {
  if (const char* m = exit_meaning(code)) return m;
  switch (code) {
    case 126: return "the launch command cannot be executed";
    case 127: return "the launch command was not found";
  }
  if (code > 128 && code < 128 + 65) return std::string("killed by signal ") + std::to_string(code - 128) + " (" + strsignal(code - 128) + ")";
  return "failure";
}

// A retry cannot fix a wrong recipe, bad data, an unusable checkpoint, a NaN
// that on_nan = "stop" refused to train through, a full disk, a node the
// health check found unfit (the same nodes would be used again; with an
// allocation the supervisor runs the check itself and excludes the node), or a launch
// command that cannot be run at all (126, 127 from the shell's convention).
bool retryable(int code) {
  return code != kExitUsage && code != kExitData && code != kExitCheckpoint && code != kExitBadStep &&
         code != kExitPreempted && code != kExitOk && code != kExitNoSpace && code != kExitUnfitNode && code != 126 &&
         code != 127;
}

class EventLog {
 public:
  explicit EventLog(const std::string& path) : log_(path, false) {}
  void write(const std::string& event, int launch, const std::string& text, JsonRecord extra = {}) {
    if (!log_.write(event_record(event, launch, text).add(extra)) && !reported_) {
      reported_ = true;  // once: the console still gets every event
      std::fprintf(stderr, "supervise: warning: cannot write %s; events go to the console only\n",
                   log_.error().c_str());
    }
    std::printf("supervise: %s\n", text.c_str());
    std::fflush(stdout);
  }

 private:
  MetricsLog log_;
  bool reported_ = false;
};

// Why run.dir cannot take a heartbeat: "" when it can, else the system's
// reason (a full disk, a quota, a read-only remount). Tried by writing, as the
// heartbeat is written; a job whose heartbeat stops for this is not hung.
std::string run_dir_unwritable(const std::string& dir) {
  const std::string probe = dir + "/.supervisor_probe";
  std::string err = replace_file(probe, std::string(4096, '\n'), false);
  std::remove(probe.c_str());
  std::remove((probe + ".tmp").c_str());
  return err;
}


// Flight recorder dumps (rank_*.json) written at or after time t.
int dumps_since(const std::string& dir, double t) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank_", 0) == 0 && e.path().extension() == ".json" && mtime_seconds(e.path().string()) >= t) n++;
  }
  return n;
}

struct Supervisor {
  const Recipe& r;
  int ranks;  // of the next launch (fewer after a shrink)
  EventLog& events;
  int restarts = 0;
  std::string recipe_path = {};                  // for the health checks the supervisor runs
  std::vector<std::string> recipe_overrides = {};  // (the command line's --set)
  int full_ranks = ranks;      // the job as the recipe has it...
  int full_nodes = 0;          // ...on launch.nodes hosts (with an allocation)
  std::optional<Shrink> shrunk = std::nullopt;  // supervisor.elastic: the smaller job launches run now

  struct Outcome {
    int code = 0;
    bool hung = false;
    bool no_space = false;  // the heartbeat stopped because run.dir cannot be written
    bool lingered = false;  // a watchdog ended the job and the launcher did not: stopped
    bool unstarted = false;  // no rank ran on a host by supervisor.start_timeout: stopped
    std::vector<std::string> hosts;  // the launch's, with an allocation; else empty
    std::string marks;      // where each host's first rank leaves a file (with hosts only)
    int forwarded = 0;  // the stop signal passed on to the job
    double forwarded_at = 0;
    double t0 = 0;
    // supervisor.on_straggler = "replace": the host to swap out, why, and
    // when that was decided (the job was asked to checkpoint and stop).
    std::string swap_host, swap_why;
    double swap_decided = 0;
    StragglerRun swap_run;  // the run it was swapped for
  };

  // A straggler swap, until the relaunch's first step measures its cost.
  struct PendingSwap {
    std::string host;
    std::vector<std::string> spares_in;
    double decided = 0;
    long last_step = -1, resume_step = 0;  // the stopped job's last step; the step the relaunch resumes from
  };
  std::optional<PendingSwap> swap = std::nullopt;
  // This run's straggler swaps, each once a spare took the host's place:
  // the ranks they moved, for the streaks to tell a slowness that followed
  // those ranks. Cleared by a shrink (it renumbers the ranks); a new
  // `supervise` forgets them, as it does the excluded hosts.
  std::vector<StragglerSwap> straggler_swaps = {};

  // A straggler to swap: the allocation's name for its host, why, and the
  // run of reports that named it.
  struct StragglerPick {
    std::string host, why;
    StragglerRun run;
  };

  // "rank 1 (dp 1, pp 0, ...)": where ranks sit in the job's grid (grid_position)
  // (the smaller job's after a shrink), to find their stage.
  std::string ranks_in_grid(const std::set<int>& ranks) const {
    const GridShape& g = shrunk ? shrunk->recipe.parallel.grid : r.parallel.grid;
    std::string out;
    for (int k : ranks) {
      if (k < 0) continue;
      out += (out.empty() ? "" : ", ") + std::to_string(k) + " (" + grid_position(g, k) + ")";
    }
    return (ranks.size() > 1 ? "ranks " : "rank ") + out;
  }

  // The message for a run on ranks an earlier swap moved (run.follows): the
  // swap did not cure them, and another would not either.
  std::string follows_text(int launch, const StragglerRun& run, const std::string& host, const std::string& swapped,
                           const std::string& figures, const Allocation& alloc) const {
    const StragglerSwap& s = *run.follows;
    const bool several = run.ranks.size() > 1;
    const bool out = alloc.excluded().count(swapped) > 0;
    return "launch " + std::to_string(launch) + ": " + ranks_in_grid(run.ranks) + (several ? " are" : " is") +
           " named again, now on host " + host + ", by " + std::to_string(run.steps.size()) +
           " straggler reports in a row (x what " + (several ? "their stages" : "its stage") + " should take:" +
           figures + ") after host " + swapped + " was swapped out for " + (several ? "them" : "it") + " at launch " +
           std::to_string(s.launch) + " (step " + std::to_string(s.step) + "): the slowness follows the " +
           (several ? "ranks" : "rank") + " (" + (several ? "their" : "its") +
           " share of the work: a stage the cost model under-predicts, the head's stage, or its data), not the "
           "host; not swapping again for " + (several ? "them" : "it") + " (a spare would not cure it" +
           (out ? "; " + swapped + " stays excluded" : std::string()) +
           "). To balance it: another layout (`trainer plan --search`), or a higher runtime.straggler_factor";
  }

  // The job's straggler events of this launch since *offset, fed to the
  // streaks; the first host named in enough reports in a row that can be
  // swapped (one of the launch's, with a spare left, while the job runs:
  // can_swap) is returned with why. One that cannot is reported once
  // (`straggler_kept`) and left; so is one on ranks an earlier swap moved
  // (`straggler_follows_rank`), which is never swapped.
  std::optional<StragglerPick> watch_stragglers(int launch, StragglerStreaks& streaks, long* offset,
                                                const Allocation& alloc, const std::vector<std::string>& hosts,
                                                std::set<std::string>& kept, bool can_swap) {
    for (const nlohmann::json& e : read_jsonl_since(r.run.dir + "/events.jsonl", offset)) {
      if (field_text(e, "event") != "straggler" || number(e, "launch") != launch) continue;
      StragglerWindow w;
      try {
        w.step = e.at("step").get<long>(), w.window_steps = e.at("window_steps").get<long>();
        w.first = e.at("window").get<long>() == 1;
        w.hosts = e.at("hosts").get<std::vector<std::string>>();
        w.ratios = e.at("ratios").get<std::vector<double>>(), w.compute_ms = e.at("compute_ms").get<std::vector<double>>();
        // (written as numbers; a report without them never follows a swap)
        if (e.contains("ranks"))
          for (double k : e.at("ranks").get<std::vector<double>>()) w.ranks.push_back((int)k);
        if (w.ranks.size() != w.hosts.size()) w.ranks.clear();
      } catch (const std::exception&) {
        continue;  // not a report this supervisor understands
      }
      for (const StragglerRun& run : streaks.add(w)) {
        std::string figures;
        for (size_t i = 0; i < run.steps.size(); i++) {
          char b[96];
          std::snprintf(b, sizeof b, "%s step %ld %.2fx (%.1f ms/step)", i ? "," : "", run.steps[i], run.ratios[i],
                        run.compute_ms[i]);
          figures += b;
        }
        const std::string named = "named by " + std::to_string(run.steps.size()) +
                                  " straggler reports in a row (supervisor.straggler_windows = " +
                                  std::to_string(r.supervisor.straggler_windows) + "; x what its stage should take:" +
                                  figures + ")";
        const std::string h = alloc.find(run.host);
        const bool in_launch = std::find(hosts.begin(), hosts.end(), h) != hosts.end();
        std::vector<double> run_ranks;  // (-1: a report gave none)
        for (int k : run.ranks)
          if (k >= 0) run_ranks.push_back(k);
        JsonRecord rec;
        rec.add("host", run.host).add("ranks", run_ranks)
            .add("steps", std::vector<double>(run.steps.begin(), run.steps.end()))
            .add("ratios", run.ratios).add("compute_ms", run.compute_ms);
        if (run.follows) {  // reported even after the job ended; never swapped
          if (kept.insert(run.host).second) {
            const std::string found = alloc.find(run.follows->host);
            const std::string was = found.empty() ? run.follows->host : found;
            rec.add("swapped_host", was).add("swapped_launch", run.follows->launch)
                .add("swapped_step", run.follows->step).add("standing", run.standing ? 1 : 0);
            events.write("straggler_follows_rank", launch,
                         follows_text(launch, run, h.empty() ? run.host : h, was, figures, alloc), rec);
          }
          continue;
        }
        if (in_launch && !alloc.spares().empty()) {
          if (!can_swap) continue;  // the job has ended: nothing to stop
          events.write("straggler_swap", launch,
                       "launch " + std::to_string(launch) + ": host " + h + " " + named +
                           ": asking the job to checkpoint and stop, to swap it for a spare",
                       rec);
          return StragglerPick{h, "a straggler: " + named, run};
        }
        if (kept.insert(run.host).second)
          events.write("straggler_kept", launch,
                       "launch " + std::to_string(launch) + ": host " + run.host + " " + named + "; " +
                           (in_launch ? "no spare left to swap in: the job goes on there"
                                      : "not one of the launch's hosts in the allocation: nothing to swap"),
                       rec);
      }
    }
    return std::nullopt;
  }

  // The step a launch of `trainer train` began at: its launches.jsonl record
  // among those appended since *offset (no clocks compared: rank 0's host
  // keeps its own), or -1 before it wrote one.
  long first_step_since(long* offset) const {
    long first = -1;
    for (const nlohmann::json& l : read_jsonl_since(r.run.dir + "/launches.jsonl", offset))
      if (l.contains("first_step") && l["first_step"].is_number_integer()) first = l["first_step"].get<long>();
    return first;
  }

  // A hung job: SIGUSR2 (mpirun and srun pass it on) makes every rank's
  // watchdog write its flight recorder, which the diagnosis reads; wait
  // until all have (at most 5 s: a rank frozen for good never will), then
  // kill the job.
  void kill_hung(pid_t pid, int* status, const std::string& launcher) {
    const double asked = now_s();
    kill(pid, SIGUSR2);
    // (mtimes come from the kernel's coarse clock: allow a few ms)
    while (now_s() - asked < 5 && dumps_since(r.run.dir + "/flight", asked - 0.05) < ranks)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    *status = stop_job(pid, launcher);
  }

  // SIGUSR1 (the ranks checkpoint at the next step and exit 75), then up to
  // two minutes for them to finish before the job is killed.
  void stop_gracefully(pid_t pid, int* status, const std::string& launcher) {
    kill(pid, SIGUSR1);
    for (int i = 0; i < 1200; i++) {
      if (waitpid(pid, status, WNOHANG) == pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    *status = stop_job(pid, launcher);
  }

  // Runs one launch of `command` (on `hosts`, with an allocation) to its
  // end: forwards a stop signal, kills it when the heartbeat stops.
  Outcome run_launch(int launch, const std::vector<std::string>& command, const std::vector<std::string>& hosts,
                     const Allocation* alloc) {
    events.write("start", launch, "launch " + std::to_string(launch) + ": " + shell_join(command),
                 JsonRecord().add("command", shell_join(command)));
    Outcome o;
    o.t0 = now_s();
    o.hosts = hosts;
    if (!hosts.empty() && r.supervisor.start_timeout > 0) {
      o.marks = r.run.dir + "/started/launch_" + std::to_string(launch);
      std::error_code ec;
      std::filesystem::remove_all(o.marks, ec);
      std::filesystem::create_directories(o.marks, ec);
    }
    const pid_t pid = spawn(command, launch_environment(launch, o.marks));
    int status = 0;
    bool all_started = o.marks.empty();
    double marks_checked = 0;
    // The supervisor stopped with its job (`scontrol suspend`, gang
    // scheduling, a paused VM) sees the heartbeat old when it comes back:
    // that time is not a hang, so the heartbeat's age counts from then.
    auto last_poll = std::chrono::steady_clock::now();
    double resumed_at = 0, flight_checked = 0, ended_at = 0, stragglers_checked = 0;
    JobEnd job_end = JobEnd::Running;
    // supervisor.on_straggler = "replace": this launch's straggler events,
    // read as the job appends them (from the end of what is there now).
    std::optional<StragglerStreaks> streaks;
    long events_offset = 0, launches_offset = 0, swap_first = -1;
    std::set<std::string> kept;
    if (swap) {  // the relaunch after a swap: its launches.jsonl record says where it resumed
      std::error_code ec;
      launches_offset = (long)std::filesystem::file_size(r.run.dir + "/launches.jsonl", ec);
      if (ec) launches_offset = 0;
    }
    if (alloc && !hosts.empty() && r.supervisor.on_straggler == "replace") {
      streaks.emplace(r.supervisor.straggler_windows, straggler_swaps);
      std::error_code ec;
      events_offset = (long)std::filesystem::file_size(r.run.dir + "/events.jsonl", ec);
      if (ec) events_offset = 0;
    }
    for (;;) {
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      // A watchdog that ended the job normally ends the launcher within
      // seconds; one still running long after waits on a host it lost (mpirun
      // waits for a cut host's daemon): the job is over, stop it.
      if (job_end != JobEnd::EndedHostLost && now_s() - flight_checked > 1) {
        flight_checked = now_s();
        // A watchdog ends a job only after its steps stopped: the flight
        // directory is read once the heartbeat is a few seconds old. The
        // linger counts from here (the dump's time is a rank host's clock).
        if (now_s() - std::max(o.t0, mtime_seconds(r.run.dir + "/heartbeat")) > 2)
          job_end = watchdog_ended_job(r.run.dir, o.t0);
        if (job_end != JobEnd::Running && ended_at == 0) ended_at = now_s();
      }
      if (ended_at > 0 &&
          now_s() - ended_at > (job_end == JobEnd::EndedHostLost ? kLostHostLinger : kLauncherLinger)) {
        char b[256];
        std::snprintf(b, sizeof b, "launch %d: a watchdog ended the job %.0f s ago and the launcher is still running "
                                   "(%s): stopping it", launch, now_s() - ended_at,
                      job_end == JobEnd::EndedHostLost ? "waiting on a host the watchdogs' probes found cut off"
                                                       : "waiting on a host it lost?");
        events.write("lingering", launch, b);
        status = stop_job(pid, command[0]);
        o.lingered = true;
        break;
      }
      const auto polled = std::chrono::steady_clock::now();
      if (const double gap = std::chrono::duration<double>(polled - last_poll).count(); gap > 2.0) {
        resumed_at = now_s();
        events.write("resumed", launch, "the supervisor was stopped for " + std::to_string((int)gap) +
                                            " s (a suspended job?): the heartbeat's age counts from now");
      }
      last_poll = polled;
      // A host whose ranks have not started by start_timeout holds up the
      // whole job (MPI_Init waits for every rank): stop it and find out why.
      // A finished step (the heartbeat) says every rank started.
      if (!all_started && now_s() - marks_checked > 1) {
        marks_checked = now_s();
        const StartMarks m = read_marks(o.marks, hosts);
        all_started = m.marked >= (int)hosts.size() || mtime_seconds(r.run.dir + "/heartbeat") > o.t0;
        if (const double since = now_s() - std::max(o.t0, resumed_at); !all_started && since > r.supervisor.start_timeout) {
          const std::string who =
              m.named ? join(m.missing)
                      : std::to_string(hosts.size() - m.marked) + " of its " + std::to_string(hosts.size()) +
                            " hosts (which: unknown, the marks' names from `hostname` are not the allocation's)";
          char b[160];
          std::snprintf(b, sizeof b, " after %.0f s (supervisor.start_timeout = %g s): stopping the launch", since,
                        r.supervisor.start_timeout);
          events.write("not_started", launch, "launch " + std::to_string(launch) + ": no rank started on " + who + b,
                       JsonRecord().add("hosts", m.missing));
          status = stop_job(pid, command[0]);
          o.unstarted = true;
          break;
        }
      }
      if (o.forwarded && now_s() - o.forwarded_at > 2) {
        // Again until the job ends: a launcher that is still starting its
        // ranks forwards the signal to none of them (the ranks take it as
        // often as it comes; they stop once).
        kill(pid, SIGUSR1);
        o.forwarded_at = now_s();
      }
      if (const int sig = stop_signal(); sig && !o.forwarded) {
        // The launcher passes SIGUSR1 on to every rank (mpirun and srun both
        // forward it); the ranks checkpoint at the next step boundary.
        o.forwarded = sig;
        o.forwarded_at = now_s();
        kill(pid, SIGUSR1);
        events.write("signal", launch, std::string("received ") + strsignal(sig) +
                                           ": asking the job to checkpoint and stop",
                     JsonRecord().add("signal", sig));
      }
      // A swap's cost: the relaunch's first step done (past the step it
      // resumed from, which its launches.jsonl record says).
      if (swap) {
        if (swap_first < 0) swap_first = first_step_since(&launches_offset);
        if (swap_first >= 0 && mtime_seconds(r.run.dir + "/heartbeat") > o.t0 &&
            read_heartbeat_step(r.run.dir) > swap_first)
          swap_done(launch, swap_first);
      }
      if (streaks && !o.forwarded && now_s() - stragglers_checked > 1) {
        stragglers_checked = now_s();
        if (const auto out = watch_stragglers(launch, *streaks, &events_offset, *alloc, hosts, kept, true)) {
          o.swap_host = out->host, o.swap_why = out->why, o.swap_decided = now_s(), o.swap_run = out->run;
          stop_gracefully(pid, &status, command[0]);
          break;
        }
      }
      const double beat = std::max({o.t0, resumed_at, mtime_seconds(r.run.dir + "/heartbeat")});
      const double hang_timeout = r.supervisor.hang_timeout;
      if (hang_timeout > 0 && now_s() - beat > hang_timeout) {
        if (const std::string why = run_dir_unwritable(r.run.dir); !why.empty()) {
          events.write("disk_full", launch,
                       "launch " + std::to_string(launch) + ": no heartbeat because " + r.run.dir +
                           " cannot be written (" + why + "): not a hang; asking the job to checkpoint and stop "
                           "(checkpoint.dir may have room) instead of restarting into it. Free space, then run the "
                           "same command to resume from the newest checkpoint",
                       JsonRecord().add("reason", why));
          stop_gracefully(pid, &status, command[0]);
          o.no_space = true;
          break;
        }
        char b[160];
        std::snprintf(b, sizeof b, "launch %d: no heartbeat for %.0f s (supervisor.hang_timeout = %g s): killing the job",
                      launch, now_s() - beat, hang_timeout);
        events.write("hang", launch, b, JsonRecord().add("since_heartbeat_s", now_s() - beat));
        kill_hung(pid, &status, command[0]);
        o.hung = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    // The reports the job wrote as it ended: a host to keep is still said.
    if (streaks && o.swap_host.empty()) watch_stragglers(launch, *streaks, &events_offset, *alloc, hosts, kept, false);
    if (swap) {  // the relaunch after a swap ended before its first step: no cost to measure
      events.write("swap_done", launch, "the straggler " + swap->host + " was swapped out, but launch " +
                                            std::to_string(launch) + " ended before its first step: no cost measured");
      swap.reset();
    }
    kill_session(pid, SIGKILL);  // ranks the launcher left behind (it is reaped: by session id only)
    o.code = o.no_space ? kExitNoSpace
             : o.lingered ? kExitCommTimeout
             : o.hung || o.unstarted ? 128 + SIGKILL
                        : exit_code(status);
    return o;
  }

  // After a launch stopped to swap a straggler: excludes it and takes a
  // spare (a `replace` event; *replaced), and keeps what the swap's cost is
  // measured against. Returns -1 to relaunch, or the exit code.
  int begin_swap(int launch, const Outcome& o, Allocation& alloc, const std::vector<std::string>& hosts,
                 bool* replaced) {
    Diagnosis d;
    d.hosts = {o.swap_host}, d.host_why = o.swap_why;
    const long last = read_heartbeat_step(r.run.dir);
    const int ranks_before = ranks;
    if (const int code = replace_blamed(launch, d, alloc, alloc.usable(), hosts, replaced); code >= 0) return code;
    // Remembered once a spare really took its place, in the same rank
    // layout (not a shrink, which renumbers the ranks).
    if (*replaced && ranks == ranks_before) straggler_swaps.push_back(StragglerStreaks::swap_of(o.swap_run, launch));
    PendingSwap p{o.swap_host, {}, o.swap_decided, last, 0};
    for (const std::string& h : alloc.launch_hosts())
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) p.spares_in.push_back(h);
    swap = p;
    return -1;
  }

  // The relaunch after a swap, resumed from step `first`, finished its
  // first step: what the swap cost.
  void swap_done(int launch, long first) {
    PendingSwap& p = *swap;
    p.resume_step = first;
    const long redone = std::max(0L, p.last_step - p.resume_step);
    char b[320];
    std::snprintf(b, sizeof b,
                  "the straggler %s swapped for %s: the first step on the new hosts %.1f s after the decision; %ld "
                  "step(s) redone (the stopped job's last step %ld, resumed from step %ld)",
                  p.host.c_str(), join(p.spares_in).c_str(), now_s() - p.decided, redone, p.last_step, p.resume_step);
    events.write("swap_done", launch, b,
                 JsonRecord().add("host", p.host).add("spares_in", p.spares_in).add("seconds", now_s() - p.decided)
                     .add("steps_redone", redone).add("last_step", p.last_step).add("resume_step", p.resume_step));
    swap.reset();
  }

  // The job's --set overrides, and the smaller job's data parallelism after a shrink.
  std::vector<std::string> overrides(std::vector<std::string> o) const {
    if (!shrunk) return o;
    const Recipe& n = shrunk->recipe;
    o.push_back("parallel.dp=" + std::to_string(n.parallel.grid.dp));
    o.push_back("launch.nodes=" + std::to_string(n.launch.nodes));
    if (r.launch.ranks > 0) o.push_back("launch.ranks=" + std::to_string(n.launch.ranks));
    return o;
  }

  // The exit event; after a failure, who crashed (crash reports) and who was
  // behind (flight recorders), which the diagnosis returned says.
  Diagnosis report(int launch, const Outcome& o) {
    const std::string what = o.hung        ? "hung, killed"
                             : o.unstarted ? "not started on every host, stopped"
                                           : meaning(o.code);
    char b[256];
    std::snprintf(b, sizeof b, "launch %d exited with code %d (%s) after %.1f s", launch, o.code, what.c_str(),
                  now_s() - o.t0);
    events.write("exit", launch, b, JsonRecord().add("code", o.code).add("seconds", now_s() - o.t0)
                                        .add("meaning", o.hung        ? std::string("hang")
                                                        : o.unstarted ? std::string("not started")
                                                                      : meaning(o.code)));
    if (o.code == kExitOk) return {};
    const Diagnosis d = diagnose_run(r.run.dir, o.t0);
    for (const CrashReport& c : d.crashes)
      events.write("crash", launch, "launch " + std::to_string(launch) + ": " + c.summary + " (backtrace: " + c.path + ")",
                   JsonRecord().add("rank", c.rank).add("summary", c.summary).add("file", c.path));
    if (d.dumps > 0)
      events.write("diagnosis", launch,
                   "launch " + std::to_string(launch) + ": " + d.verdict + (d.culprit.empty() ? "" : " " + d.culprit) +
                       " (the whole report: trainer diagnose " + r.run.dir + ")",
                   JsonRecord().add("verdict", d.verdict).add("culprit", d.culprit).add("report", d.report));
    return d;
  }

  // After a failed launch that nothing else blames on a host: when the
  // supervisor stopped it at start_timeout, the hosts whose ranks never
  // started while others' did (not after any failure: a host still starting
  // when another failed fast would be blamed); when no host's started (mpirun
  // starts every host's ranks or none) and no step finished, the hosts on
  // which a launch of `trainer version` alone fails while it runs on another
  // of `probed` (the usable hosts: with launch.nodes = 1 the spares are the
  // others; a spare where it fails is excluded too).
  Diagnosis start_verdict(int launch, const Outcome& o, const std::vector<std::string>& probed) {
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
    if (mtime_seconds(r.run.dir + "/heartbeat") > o.t0) return d;  // a step finished: every rank started
    const std::vector<std::string> failed = probe_hosts(launch, probed, o.marks);
    if (!failed.empty() && failed.size() < probed.size()) {
      d.hosts = failed;  // a spare among them had no ranks in the launch: the why names the probe
      d.host_why = "`trainer version` launched on it alone failed where it ran on another host (no rank of "
                   "launch " + std::to_string(launch) + " started on any host)";
    }
    return d;
  }

  // Launches `trainer version` on each host alone (up to 32 at once), each
  // given start_timeout; returns the hosts where it failed or did not
  // finish. An event lists every result; each probe's output is in
  // MARKS/probe_HOST.log.
  std::vector<std::string> probe_hosts(int launch, const std::vector<std::string>& hosts, const std::string& marks) {
    std::vector<std::string> failed, results;
    for (size_t first = 0; first < hosts.size() && !stop_signal(); first += 32) {
      std::vector<pid_t> pids;
      const size_t last = std::min(hosts.size(), first + 32);
      for (size_t i = first; i < last; i++) {
        std::vector<std::string> cmd = launcher_prefix(r, 1, {hosts[i]}, true);
        cmd.insert(cmd.end(), {self_executable(), "version"});
        pids.push_back(spawn(cmd, launch_environment(launch, ""), marks + "/probe_" + hosts[i] + ".log"));
      }
      const std::vector<ChildEnd> ends = wait_children(pids, r.supervisor.start_timeout, r.launch.launcher);
      for (size_t i = first; i < last; i++) {
        const ChildEnd& e = ends[i - first];
        char b[64];
        std::snprintf(b, sizeof b, "no answer in %.0f s", r.supervisor.start_timeout);  // the wait's own limit
        const std::string result = e.stopped     ? "stopped (a stop signal)"
                                   : e.timed_out ? std::string(b)
                                   : e.code != 0 ? "exit " + std::to_string(e.code)
                                                 : "ok";
        if (result != "ok" && !e.stopped) failed.push_back(hosts[i]);
        results.push_back(hosts[i] + ": " + result);
      }
    }
    events.write("start_probe", launch,
                 "launch " + std::to_string(launch) + ": no rank started on any host; `trainer version` on each "
                 "alone: " + join(results) + " (output: " + marks + "/probe_HOST.log)",
                 JsonRecord().add("failed", failed).add("results", results));
    return failed;
  }

  // The hosts the diagnosis blames, of those in `among`, are excluded, and
  // spares take the places of those among `used` (the launch's hosts: after
  // a failed launch, or about to launch after the health check). Returns -1
  // to launch (*replaced: on a spare), or the exit code when no spare is left.
  int replace_blamed(int launch, const Diagnosis& d, Allocation& alloc, const std::vector<std::string>& among,
                     const std::vector<std::string>& used, bool* replaced) {
    *replaced = false;
    std::vector<std::string> out, unknown;
    for (const std::string& name : d.hosts) {
      const std::string h = alloc.find(name);
      if (h.empty()) unknown.push_back(name);
      else if (std::find(among.begin(), among.end(), h) != among.end() && alloc.exclude(h, d.host_why)) out.push_back(h);
    }
    if (!unknown.empty())
      events.write("unknown_host", launch,
                   "the failure is blamed on " + join(unknown) + " (" + d.host_why +
                       "), which is not one of the allocation's hosts (" + join(alloc.hosts()) +
                       "): nothing excluded for it; name the hosts in launch.hosts or the hostfile as their "
                       "`hostname` does",
                   JsonRecord().add("hosts", unknown).add("why", d.host_why));
    if (out.empty()) return -1;  // unattributed: retried on the same hosts
    const std::vector<std::string> next = alloc.launch_hosts();
    std::vector<std::string> in;
    for (const std::string& h : next)
      if (std::find(used.begin(), used.end(), h) == used.end()) in.push_back(h);
    JsonRecord rec;
    rec.add("excluded", out).add("why", d.host_why).add("spares_in", in).add("hosts", next)
        .add("spares_left", next.empty() ? std::vector<std::string>{} : alloc.spares());
    const std::string excluded = "host" + std::string(out.size() > 1 ? "s " : " ") + join(out) + " excluded: " + d.host_why;
    if (!next.empty() && in.empty()) {
      // Only spares were excluded (by a check before a launch, or a probe):
      // the launch's hosts stay as they were.
      events.write("replace", launch, excluded + "; a spare, so the launch keeps its hosts (" + join(next) + ")", rec);
      return -1;
    }
    const std::string spares_in = "; spare" + std::string(in.size() > 1 ? "s " : " ") + join(in) + " in";
    if (next.empty()) {
      const int left = (int)alloc.usable().size();
      if (r.supervisor.elastic && left > 0) {
        // The most hosts that make a valid job (the others wait as spares).
        Shrink s = shrink_job(r, full_ranks, full_nodes, left, r.runtime.memory_check);
        for (int n = left - 1; !s.ok && n >= 1; n--)
          if (Shrink t = shrink_job(r, full_ranks, full_nodes, n, r.runtime.memory_check); t.ok) s = std::move(t);
        if (s.ok) return shrink(launch, std::move(s), alloc, excluded, rec, replaced);
        events.write("no_spare", launch,
                     excluded + "; no spare left, and the job cannot shrink to the " + std::to_string(left) +
                         " usable host(s) (supervisor.elastic): " + s.why +
                         "; giving up; give the job more hosts and run the same command to resume",
                     rec.add("shrink_refused", s.why));
        return kExitGaveUp;
      }
      if (!r.supervisor.elastic && r.supervisor.spare_wait > 0)
        return wait_for_hosts(launch, alloc, excluded, rec);
      events.write("no_spare", launch,
                   excluded + "; no spare left (" + std::to_string(left) + " usable host(s), launch.nodes = " +
                       std::to_string(alloc.nodes()) + (r.supervisor.elastic ? "" : "; supervisor.elastic = false") +
                       "): giving up; give the job more hosts and run the same command to resume",
                   rec);
      return kExitGaveUp;
    }
    // The newest committed checkpoint; the relaunch verifies it (reading
    // every byte, which is its work, not the supervisor's) and falls back to
    // an older one if it is broken.
    const std::string latest = latest_checkpoint(r.checkpoint.dir);
    const long step = latest.empty() ? 0 : checkpoint_step(latest);
    rec.add("resume_step", step);
    events.write("replace", launch,
                 excluded + spares_in + "; resuming from " +
                     (latest.empty() ? std::string("the start (no checkpoint yet)")
                                     : "step " + std::to_string(step) + " (the newest checkpoint, if it verifies)") +
                     " on " + join(next),
                 rec);
    *replaced = !in.empty();
    return -1;
  }

  // `trainer health` on each excluded host in turn beside the usable ones
  // (one rank each, so that its figures are judged against theirs): the
  // excluded hosts found fit. A host that cannot start its rank fails its
  // own check only, and a launcher that hangs on it is stopped after
  // kCheckLimit s, so one still out of reach keeps no other out. Each
  // check within `until`, and at least a few seconds (the wait's last
  // round may overrun it by those).
  static constexpr double kCheckLimit = 30;  // s: a health check takes a few
  std::vector<std::string> fit_again(int launch, const Allocation& alloc, double until) {
    const std::vector<std::string> usable = alloc.usable();
    const std::map<std::string, std::string> excluded = alloc.excluded();
    std::vector<std::string> fit;
    for (const auto& [h, why] : excluded) {
      if (stop_signal()) break;
      std::vector<std::string> hosts;  // in the allocation's order
      for (const std::string& a : alloc.hosts())
        if (a == h || std::find(usable.begin(), usable.end(), a) != usable.end()) hosts.push_back(a);
      const std::vector<std::string> cmd =
          launch_command(r, "health", recipe_path, recipe_overrides, (int)hosts.size(), hosts, launch);
      events.write("health_check", launch,
                   "waiting for hosts: trainer health on excluded host " + h + " beside the " +
                       std::to_string(usable.size()) + " usable host(s): " + shell_join(cmd),
                   JsonRecord().add("host", h).add("hosts", hosts).add("command", shell_join(cmd)));
      const double cap = std::max(kCheckLimit, r.supervisor.spare_check_every);
      const double limit = std::max(5.0, std::min(until - now_s(), cap));
      const ChildEnd end = wait_children({spawn(cmd, launch_environment(launch, ""))}, limit, cmd[0])[0];
      if (end.stopped) break;
      if (end.code != kExitOk && end.code != kExitUnfitNode) {
        events.write("health_failed", launch,
                     "trainer health with " + h + " reached no verdict (" +
                         (end.timed_out ? std::string("no answer in time") : "exit " + std::to_string(end.code)) +
                         "): it is still out of reach",
                     JsonRecord().add("host", h).add("code", end.code));
        continue;
      }
      if (end.code == kExitUnfitNode) {
        // Fit only when the verdict names hosts of the allocation, h not
        // among them (a verdict naming none, or an unknown one, clears none).
        const Diagnosis d = health_verdict(r.run.dir, launch);
        bool cleared = !d.hosts.empty();
        for (const std::string& name : d.hosts)
          if (const std::string a = alloc.find(name); a.empty() || a == h) cleared = false;
        if (!cleared) continue;
      }
      fit.push_back(h);
    }
    return fit;
  }

  // No spare left and supervisor.spare_wait: every spare_check_every seconds
  // the excluded hosts are checked; those fit again return with
  // supervisor.readmit. Returns -1 once a launch has its hosts (a restart,
  // not a relaunch on spares), else exit 7 when the wait is over (75 on a
  // stop signal).
  int wait_for_hosts(int launch, Allocation& alloc, const std::string& excluded, JsonRecord rec) {
    const SupervisorSection& sv = r.supervisor;
    const double t0 = now_s(), until = t0 + sv.spare_wait;
    const int left = (int)alloc.usable().size();
    char b[320];
    std::snprintf(b, sizeof b,
                  "; no spare left (%d usable host(s), launch.nodes = %d): waiting up to %g s (supervisor.spare_wait) "
                  "for hosts to come back, with trainer health on each excluded one every %g s%s",
                  left, alloc.nodes(), sv.spare_wait, sv.spare_check_every,
                  sv.readmit ? " (readmitted when fit: supervisor.readmit)"
                             : "; supervisor.readmit = false: none of them returns, so only the end of the wait");
    events.write("no_spare", launch, excluded + b, rec.add("wait_s", sv.spare_wait));
    std::set<std::string> said;
    for (;;) {
      for (const double next = std::min(until, now_s() + sv.spare_check_every); now_s() < next;) {
        if (stop_signal()) {
          events.write("preempted", launch, std::string(strsignal(stop_signal())) + " received while waiting for "
                                            "hosts; nothing launched; exiting with " + std::to_string(kExitPreempted));
          return kExitPreempted;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      // Each check within the wait (a launcher that hangs on a dead host is
      // stopped at its end).
      const std::vector<std::string> fit = fit_again(launch, alloc, until);
      if (stop_signal()) {
        events.write("preempted", launch, std::string(strsignal(stop_signal())) + " received while waiting for "
                                          "hosts; nothing launched; exiting with " + std::to_string(kExitPreempted));
        return kExitPreempted;
      }
      for (const std::string& h : fit) {
        if (sv.readmit) {
          alloc.readmit(h);
          events.write("readmit", launch,
                       "host " + h + " passes trainer health again: back in the allocation (supervisor.readmit), " +
                           std::to_string((int)(now_s() - t0)) + " s into the wait",
                       JsonRecord().add("host", h).add("waited_s", now_s() - t0));
        } else if (said.insert(h).second) {
          events.write("fit_again", launch,
                       "host " + h + " passes trainer health again; supervisor.readmit = false keeps it out",
                       JsonRecord().add("host", h));
        }
      }
      // The hosts are back: the relaunch counts against max_restarts (a
      // host that comes and goes must not relaunch the job for ever).
      if (!alloc.launch_hosts().empty()) return -1;
      if (now_s() >= until) break;
    }
    std::string out;
    for (const auto& [h, why] : alloc.excluded()) out += (out.empty() ? "" : "; ") + h + " (" + why + ")";
    const int usable = (int)alloc.usable().size(), back = usable - left;  // back: readmitted in the wait
    std::string came = back > 0 ? std::to_string(back) + " came back, too few" : "none came back";
    if (!sv.readmit)
      came = said.empty() ? came + " (supervisor.readmit = false)"
                          : std::to_string(said.size()) + " passed trainer health but stay(s) out (supervisor.readmit = false)";
    events.write("give_up", launch,
                 "waited " + std::to_string((int)(now_s() - t0)) + " s (supervisor.spare_wait = " +
                     std::to_string((int)sv.spare_wait) + " s) for " + std::to_string(alloc.nodes() - usable) +
                     " more host(s) to run launch.nodes = " + std::to_string(alloc.nodes()) + " (" +
                     std::to_string(usable) + " usable; excluded: " + out + "): " + came +
                     "; giving up; give the job more hosts and run the same command to resume",
                 JsonRecord().add("code", kExitGaveUp).add("waited_s", now_s() - t0));
    return kExitGaveUp;
  }

  // supervisor.elastic with no spare left: the next launches run the
  // smaller job `s` on the hosts left (a `shrink` event; *replaced: at once).
  int shrink(int launch, Shrink s, Allocation& alloc, const std::string& excluded, JsonRecord rec, bool* replaced) {
    const GridShape& g = r.parallel.grid;
    const int dp_was = shrunk ? shrunk->recipe.parallel.grid.dp : full_ranks / (int)g.model_ranks();
    alloc.shrink(s.nodes);
    const std::vector<std::string> next = alloc.launch_hosts();
    const std::string latest = latest_checkpoint(r.checkpoint.dir);
    const long step = latest.empty() ? 0 : checkpoint_step(latest);
    const Recipe& n = s.recipe;
    rec.add("hosts", next).add("nodes", s.nodes).add("ranks", s.ranks).add("dp", n.parallel.grid.dp)
        .add("accum_steps", n.accum_steps()).add("resume_step", step);
    char b[256];
    std::snprintf(b, sizeof b,
                  "; no spare left: shrinking to %d node(s) (supervisor.elastic): %d ranks, dp %d -> %d, %d "
                  "micro-batches per replica per step (global batch %ld unchanged); resuming from ",
                  s.nodes, s.ranks, dp_was, n.parallel.grid.dp, n.accum_steps(), (long)n.training.global_batch);
    events.write("shrink", launch,
                 excluded + b +
                     (latest.empty() ? std::string("the start (no checkpoint yet)")
                                     : "step " + std::to_string(step) + " (the newest checkpoint, if it verifies)") +
                     " on " + join(next),
                 rec);
    ranks = s.ranks;
    straggler_swaps.clear();  // the ranks they moved are numbered otherwise now
    shrunk = std::move(s);
    *replaced = true;
    return -1;
  }

  // health.check with an allocation: before each launch `trainer health`
  // measures every usable host, one rank each (the spares too, so that none
  // takes the place of a host while unfit itself), and the hosts it finds
  // unfit are excluded (a `replace` event). Returns -1 to launch, or the
  // supervisor's exit code (no spare left: 7; a stop signal: 75; the
  // checkpoint directory's disk full on every host: 8).
  int check_hosts(int launch, Allocation& alloc, const std::string& recipe_path,
                  const std::vector<std::string>& overrides) {
    const std::vector<std::string> planned = alloc.launch_hosts(), usable = alloc.usable();
    const std::vector<std::string> cmd =
        launch_command(r, "health", recipe_path, overrides, (int)usable.size(), usable, launch);
    events.write("health_check", launch,
                 "before launch " + std::to_string(launch) + ": trainer health on the " + std::to_string(usable.size()) +
                     " usable host(s): " + shell_join(cmd),
                 JsonRecord().add("hosts", usable).add("command", shell_join(cmd)));
    const double t0 = now_s();
    // Its limit: hang_timeout (900 s when off): a host that cannot start
    // holds up mpirun, and the launch after then finds it (start_timeout).
    // A verdict already recorded (a host cut off mid-check, named by the
    // others) ends the wait kLauncherLinger s later: mpirun may wait for
    // the cut host's daemon for ever.
    double verdict_at = 0;
    auto lingering = [&] {
      if (verdict_at == 0 && !health_verdict(r.run.dir, launch).hosts.empty()) verdict_at = now_s();
      return verdict_at > 0 && now_s() - verdict_at > kLauncherLinger;
    };
    const ChildEnd end = wait_children({spawn(cmd, launch_environment(launch, ""))},
                                       r.supervisor.hang_timeout > 0 ? r.supervisor.hang_timeout : 900, cmd[0],
                                       lingering)[0];
    if (end.stopped) {
      events.write("preempted", launch, std::string(strsignal(stop_signal())) + " received during the health check; "
                                        "nothing launched; exiting with " + std::to_string(kExitPreempted));
      return kExitPreempted;
    }
    char took[64];
    std::snprintf(took, sizeof took, " after %.1f s", now_s() - t0);
    if (end.over)
      events.write("lingering", launch, std::string("trainer health recorded its verdict and its launcher was still "
                                                    "running (waiting on a host it lost?)") + took + ": stopped it");
    const int code = end.over ? kExitUnfitNode : end.code;
    const bool timed_out = end.timed_out;
    if (code == kExitOk) {
      events.write("health_ok", launch, "every usable host is fit" + std::string(took));
      return -1;
    }
    if (code == kExitNoSpace) {  // the checkpoint directory's disk, on every node: no host to blame
      events.write("disk_full", launch,
                   std::string("trainer health: checkpoint.dir cannot take a checkpoint on any host (its output "
                               "says why)") + took +
                       "; not launching into it, no host excluded",
                   JsonRecord().add("code", code));
      return kExitNoSpace;
    }
    if (code != kExitUnfitNode) {
      events.write("health_failed", launch,
                   "trainer health exited with code " + std::to_string(code) + " (" +
                       (timed_out ? std::string("no answer in time") : meaning(code)) + ")" +
                       took + ": launching without its verdict",
                   JsonRecord().add("code", code));
      return -1;
    }
    // Unfit: exclude the hosts it names; one it found unfit and that cannot
    // be excluded (no event, a name outside the allocation) stops the run as
    // the job's own check would (the job runs with that check off).
    const size_t before = alloc.excluded().size();
    bool replaced = false;
    const int code2 = replace_blamed(launch, health_verdict(r.run.dir, launch), alloc, usable, planned, &replaced);
    if (code2 >= 0 || alloc.excluded().size() > before) return code2;
    events.write("give_up", launch, "trainer health found a node unfit and named no host that can be excluded; not "
                                    "launching on it (take the node out of the allocation, or health.check = false)",
                 JsonRecord().add("code", kExitUnfitNode));
    return kExitUnfitNode;
  }

  // The supervisor's exit code after this launch, or -1 to restart.
  int decide(int launch, const Outcome& o) {
    const int code = o.code;
    if (code == kExitOk) {
      // training.exit_after ends a launch early by request: not finished.
      if (const long at = read_heartbeat_step(r.run.dir); r.training.exit_after > 0 && at >= 0 && at < r.training.steps) {
        events.write("paused", launch,
                     "the job stopped at step " + std::to_string(at) + " of " + std::to_string(r.training.steps) +
                         " (training.exit_after = " + std::to_string(r.training.exit_after) +
                         "); the same command continues from its checkpoint",
                     JsonRecord().add("step", at));
        return kExitOk;
      }
      events.write("done", launch, "training finished after " + std::to_string(launch + 1) + " launch(es)");
      return kExitOk;
    }
    if (code == kExitPreempted || o.forwarded) {
      events.write("preempted", launch, "the job stopped on a signal; exiting with " + std::to_string(kExitPreempted) +
                                            " so the scheduler can requeue it");
      // A job stopped on our signal ends with the requeue code however it
      // ended (a rank killed by the signal while MPI came up: 138), unless
      // it failed for a reason a requeue cannot fix.
      return code == kExitPreempted || retryable(code) ? kExitPreempted : code;
    }
    if (!retryable(code)) {
      events.write("give_up", launch, "not restarting: " + meaning(code) + " (exit " + std::to_string(code) +
                                          ") is not something a restart can fix; see the job's messages above",
                   JsonRecord().add("code", code));
      return code;
    }
    if (restarts >= r.supervisor.max_restarts) {
      events.write("give_up", launch, "giving up: the job failed " + std::to_string(restarts + 1) +
                                          " time(s) and supervisor.max_restarts = " +
                                          std::to_string(r.supervisor.max_restarts) +
                                          " restarts are used up; the last failure: " + meaning(code),
                   JsonRecord().add("code", code));
      return kExitGaveUp;
    }
    return -1;
  }

  // Waits out the backoff before the next launch; false if a stop signal
  // came. A launch on spares that replaced the hosts at fault starts at once
  // and is not counted against max_restarts (the spares bound how often).
  bool back_off(int launch, bool replaced) {
    const SupervisorSection& sv = r.supervisor;
    const double delay = replaced ? 0 : sv.backoff_before(restarts);
    if (!replaced) restarts++;
    char b[200];
    if (replaced)
      std::snprintf(b, sizeof b, "relaunching at once on the new hosts, from the newest valid checkpoint (not counted "
                                 "as a restart: %d of %d used)", restarts, sv.max_restarts);
    else
      std::snprintf(b, sizeof b, "restart %d of %d in %.1f s, from the newest valid checkpoint", restarts,
                    sv.max_restarts, delay);
    // on_spares 1: a relaunch on spares (trainer status counts it apart)
    events.write("restart", launch + 1, b,
                 JsonRecord().add("restart", restarts).add("delay_s", delay).add("on_spares", replaced ? 1 : 0));
    for (const double until = now_s() + delay; now_s() < until;) {
      if (stop_signal()) {
        events.write("preempted", launch, "stop requested while waiting to restart; exiting with " +
                                              std::to_string(kExitPreempted));
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return true;
  }
};

}  // namespace

int cmd_supervise(int argc, char** argv) {
  const RecipeArgs args = parse_recipe_args({"supervise", kSuperviseUsage, {}, {}, false, true}, argc, argv);
  if (args.help) return std::fputs(kSuperviseUsage, stdout), kExitOk;
  install_stop_signals(true);  // a stop during set-up: no launch, the requeue code (not exit 138)
  const Recipe r = load_recipe(args.recipe, args.overrides, 0, true);
  const int ranks = r.launch.ranks > 0 ? r.launch.ranks : r.parallel.grid.ranks();
  std::optional<Allocation> alloc = job_allocation(r);
  if (alloc && !args.after_dashes.empty())
    throw RecipeError("[launch] hosts, hostfile or nodes place the job's ranks, which a launch command given after "
                      "`--` does not let `supervise` do: drop one or the other");
  // Made now, so that they are locked from the first launch on (a lock needs
  // the directory): else a stray run could take them during the first backoff.
  ensure_run_dirs(r);
  // The supervisor owns the run's directories across all its launches; each
  // launch's rank 0 shares the lock through the token.
  RunDirLocks locks;
  lock_run_dirs(r, locks, "");
  setenv("TRAINER_LOCK_TOKEN", locks.run.token().c_str(), 1);
  EventLog events(r.run.dir + "/events.jsonl");
  Supervisor sup{r, ranks, events};
  if (alloc) sup.full_nodes = alloc->nodes();
  sup.recipe_path = args.recipe, sup.recipe_overrides = args.overrides;
  if (alloc)
    events.write("allocation", 0,
                 std::to_string(alloc->hosts().size()) + " host(s): " + join(alloc->hosts()) + "; each launch runs on " +
                     std::to_string(alloc->nodes()) + ", spares: " +
                     (alloc->spares().empty() ? "none" : join(alloc->spares())),
                 JsonRecord().add("hosts", alloc->hosts()).add("nodes", alloc->nodes()).add("spares", alloc->spares()));
  // The supervisor's health check stands for the job's own.
  std::vector<std::string> job_overrides = args.overrides;
  if (alloc && r.health.check) job_overrides.push_back("health.check=false");
  for (int launch = 0;; launch++) {
    if (const int sig = stop_signal()) {  // came before this launch (the backoff watches for it too)
      events.write("preempted", launch, std::string(strsignal(sig)) + " received before launch " +
                                            std::to_string(launch) + "; nothing started; exiting with " +
                                            std::to_string(kExitPreempted) + " so the scheduler can requeue it");
      return kExitPreempted;
    }
    if (alloc && r.health.check) {
      if (const int code = sup.check_hosts(launch, *alloc, args.recipe, args.overrides); code >= 0) return code;
      if (const int sig = stop_signal()) {  // came as the check ended (it may have ended the check)
        events.write("preempted", launch, std::string(strsignal(sig)) + " received during the health check; nothing "
                                          "launched; exiting with " + std::to_string(kExitPreempted));
        return kExitPreempted;
      }
    }
    const std::vector<std::string> hosts = alloc ? alloc->launch_hosts() : std::vector<std::string>{};
    const std::vector<std::string> command =
        args.after_dashes.empty() ? launch_command(r, "train", args.recipe, sup.overrides(job_overrides), sup.ranks,
                                                   hosts, launch)
                                  : args.after_dashes;
    const Supervisor::Outcome o = sup.run_launch(launch, command, hosts, alloc ? &*alloc : nullptr);
    Diagnosis d = sup.report(launch, o);
    // With an allocation, the hosts a failure is blamed on are replaced by
    // spares. What names no host of the launch goes on as without spares: a
    // retry on the same hosts, or the end. A straggler the supervisor
    // stopped the job for is swapped.
    bool replaced = false;
    // (Only once it checkpointed and stopped as asked: a job that failed
    // meanwhile is judged as any failure, one stopped by a signal to the
    // supervisor too.)
    const bool swapping = !o.swap_host.empty() && !o.forwarded && o.code == kExitPreempted && !stop_signal();
    if (swapping) {
      if (const int code = sup.begin_swap(launch, o, *alloc, hosts, &replaced); code >= 0) return code;
    } else if (alloc && !o.forwarded && retryable(o.code)) {
      const std::vector<std::string> usable = alloc->usable();  // the probes may blame a spare too
      if (d.hosts.empty()) d = sup.start_verdict(launch, o, usable);
      if (const int code = sup.replace_blamed(launch, d, *alloc, usable, hosts, &replaced); code >= 0) return code;
    }
    if (!replaced && !swapping)
      if (const int code = sup.decide(launch, o); code >= 0) return code;
    if (!sup.back_off(launch, replaced)) return kExitPreempted;
  }
}

}  // namespace trainer
