// `trainer status RUN_DIR`: where a run stands, from the files it keeps
// current (no MPI, safe while it runs): progress and loss (metrics.jsonl),
// how long to go, liveness (heartbeat), the newest checkpoint, and what the
// supervisor saw (events.jsonl: launches, restarts, the last failure and its
// crash or diagnosis event).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "runtime/shell_words.h"
#include "app/recipe.h"
#include "report/run_files.h"
#include "ckpt/checkpoint.h"
#include "runtime/errors.h"
#include "runtime/run_events.h"
#include "runtime/flight_recorder.h"
#include "runtime/metrics_fields.h"
#include "runtime/replace_file.h"
#include "runtime/units.h"

namespace trainer {

namespace {

namespace mf = metrics_field;

using nlohmann::json;

const char* kStatusUsage =
    "usage: trainer status RUN_DIR\n"
    "  Where a run stands, from its files (safe while it runs): step and loss\n"
    "  (metrics.jsonl), time to go (mean step time of the last 20 logged steps x steps\n"
    "  left), heartbeat age, newest checkpoint, and, under `trainer supervise`, launches,\n"
    "  restarts and the last failure (events.jsonl); last, how to make the run's report\n"
    "  (`trainer report`). Exit 0; 2 if RUN_DIR has none of them.\n";

// A record's number, or `dflt` when absent or not a number (a damaged or
// edited file must not stop the status).
double num(const json& r, const char* key, double dflt) {
  const double v = number(r, key);
  return std::isnan(v) ? dflt : v;
}

}  // namespace

int cmd_status(int argc, char** argv) {
  if (argc != 1 || std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h") {
    std::fputs(kStatusUsage, argc == 1 ? stdout : stderr);
    return argc == 1 ? kExitOk : kExitUsage;
  }
  const std::string dir = argv[0];
  const RunFiles files = read_run_files(dir);
  const std::vector<json>& metrics = files.metrics;
  const std::vector<json>& run_events = files.events;
  const double beat_time = files.heartbeat_mtime;
  const bool has_heartbeat = beat_time > 0;
  if (metrics.empty() && run_events.empty() && !has_heartbeat) {
    std::fprintf(stderr, "error: %s has no metrics.jsonl, events.jsonl or heartbeat: not a run directory "
                         "(the recipe's [run] dir), or the run has not started\n", dir.c_str());
    return kExitUsage;
  }
  // From the resolved recipe the run wrote: its length and checkpoints.
  const RunFacts facts = read_run_facts(dir + "/recipe.resolved.toml");
  const long steps = facts.steps, ckpt_every = facts.checkpoint_every;
  // checkpoint.dir is relative to where the run was launched, which may not be here.
  const std::string ckpt_dir = !facts.checkpoint_dir.empty() && std::filesystem::exists(facts.checkpoint_dir)
                                   ? facts.checkpoint_dir
                                   : dir + "/checkpoints";
  // Paths as a shell would take them back (a run dir with spaces is quoted).
  const std::string shown_dir = shell_quote(dir);
  std::printf("run %s\n", shown_dir.c_str());
  if (files.unreadable > 0)
    std::printf("  note:       %d damaged or partial line(s) in the run's .jsonl files skipped\n", files.unreadable);

  if (!metrics.empty()) {
    const json& last = metrics.back();
    const long step = (long)num(last, mf::kStep, 0);
    std::printf("  progress:   step %ld", step);
    if (steps > 0) std::printf(" of %ld (%.0f%%)", steps, 100.0 * step / steps);
    std::printf(", loss %.4f", num(last, mf::kLoss, 0));
    for (auto it = metrics.rbegin(); it != metrics.rend(); ++it)
      if (it->contains(mf::kValLoss)) {
        std::printf(", val loss %.4f (step %ld)", num(*it, mf::kValLoss, NAN), (long)num(*it, mf::kStep, 0));
        break;
      }
    std::printf(", %.0f tokens/s\n", num(last, mf::kTokensPerS, 0));
    if (const TimeToGo t = time_to_go(files, steps); t.steps_left > 0)
      std::printf("  to go:      %ld steps, about %s at %.0f ms per step\n", t.steps_left,
                  format_duration(t.seconds()).c_str(), t.step_ms);
  }
  if (has_heartbeat)
    std::printf("  heartbeat:  %s ago (after step %ld)\n", format_duration(wall_seconds() - beat_time).c_str(),
                files.heartbeat_step);
  const std::string latest = latest_checkpoint(ckpt_dir);
  std::printf("  checkpoint: %s\n", !latest.empty() ? shell_quote(latest).c_str()
                                     : ckpt_every == 0 ? "off (checkpoint.every = 0)"
                                                       : ("none yet in " + shell_quote(ckpt_dir)).c_str());

  // The trainer's own throughput and straggler reports, the newest of each
  // (it writes them to events.jsonl too).
  std::vector<json> supervisor;
  std::optional<events::Head> drop, straggler;
  for (const json& e : run_events) {
    if (events::is<events::ThroughputDrop>(e)) drop = events::head(e);
    else if (events::is<events::Straggler>(e)) straggler = events::head(e);
    else supervisor.push_back(e);
  }
  if (drop) std::printf("  throughput: %s\n", drop->message.c_str());
  if (straggler) std::printf("  straggler:  %s\n", straggler->message.c_str());
  if (!supervisor.empty()) {
    int launches = 0, restarts = 0, on_spares = 0;  // relaunches on spares are not restarts
    std::optional<events::Head> failure;  // the last exit that was not a success
    std::vector<events::Head> explained;  // crash / diagnosis events of that launch
    for (const json& e : supervisor) {
      const events::Head h = events::head(e);
      if (events::is<events::Start>(e)) launches++;
      if (const auto r = events::read<events::Restart>(e)) (r->on_spares != 0 ? on_spares : restarts)++;
      if (const auto x = events::read<events::Exit>(e); x && x->code != 0) failure = h, explained.clear();
      const bool explains = events::is<events::Crash>(e) || events::is<events::Diagnosis>(e) ||
                            events::is<events::StartProbe>(e) || events::is<events::UnknownHost>(e) ||
                            events::is<events::Replace>(e) || events::is<events::NoSpare>(e);
      if (explains && failure && h.launch == failure->launch) explained.push_back(h);
    }
    const events::Head last = events::head(supervisor.back());
    const std::string spares = on_spares ? ", " + std::to_string(on_spares) + " relaunch(es) on spares" : "";
    std::printf("  supervisor: %d launch(es), %d restart(s)%s; last event: %s at %s: %s\n", launches, restarts,
                spares.c_str(), last.event.c_str(), last.time.c_str(), last.message.c_str());
    if (failure) {
      std::printf("  last failure: %s\n", failure->message.c_str());
      for (const events::Head& e : explained) std::printf("    %s: %s\n", e.event.c_str(), e.message.c_str());
    }
  }
  const double made = mtime_seconds(dir + "/report.html");
  std::printf(
      "  report:     trainer report %s (charts, launches and events in one HTML page%s)\n", shown_dir.c_str(),
      made > 0 ? (": " + shell_quote(dir + "/report.html") + " is " + format_duration(wall_seconds() - made) + " old")
                     .c_str()
               : "");
  return kExitOk;
}

}  // namespace trainer
