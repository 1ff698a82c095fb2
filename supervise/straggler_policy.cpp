#include "supervise/straggler_policy.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "report/run_files.h"
#include "runtime/flight_recorder.h"
#include "runtime/replace_file.h"
#include "runtime/units.h"

namespace trainer {

namespace {

long file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : (long)n;
}

}  // namespace

void StragglerPolicy::begin_launch(bool watch) {
  streaks_.reset();
  kept_.clear();
  swap_first_ = -1;
  // The relaunch after a swap: its launches.jsonl record says where it resumed.
  if (pending_) launches_offset_ = file_size_or_zero(r_.run.dir + "/launches.jsonl");
  if (watch) {
    streaks_.emplace(r_.supervisor.straggler_windows, swaps_);
    events_offset_ = file_size_or_zero(r_.run.dir + "/events.jsonl");
  }
}

std::optional<StragglerPick> StragglerPolicy::poll(int launch, const Allocation& alloc,
                                                   const std::vector<std::string>& hosts, const GridShape& grid,
                                                   bool can_swap) {
  if (!streaks_) return std::nullopt;
  return read_reports(launch, alloc, hosts, grid, can_swap);
}

// A swap's cost: the relaunch's first step done (past the step it resumed
// from, which its launches.jsonl record says).
void StragglerPolicy::measure_swap(int launch, double t0) {
  if (!pending_) return;
  if (swap_first_ < 0) swap_first_ = first_step_since(&launches_offset_);
  if (swap_first_ >= 0 && mtime_seconds(r_.run.dir + "/heartbeat") > t0 && read_heartbeat_step(r_.run.dir) > swap_first_)
    swap_done(launch, swap_first_);
}

void StragglerPolicy::end_launch(int launch, const Allocation* alloc, const std::vector<std::string>& hosts,
                                 const GridShape& grid, bool picked) {
  // The reports the job wrote as it ended: a host to keep is still said.
  if (streaks_ && alloc && !picked) read_reports(launch, *alloc, hosts, grid, false);
  if (pending_) {  // the relaunch after a swap ended before its first step: no cost to measure
    events_.write<events::SwapDone>(launch, "the straggler " + pending_->host + " was swapped out, but launch " +
                                                std::to_string(launch) + " ended before its first step: no cost measured");
    pending_.reset();
  }
}

void StragglerPolicy::swapped(const StragglerPick& pick, int launch, long last_step,
                              const std::vector<std::string>& spares_in, bool same_layout) {
  // Remembered once a spare really took its place, in the same rank layout.
  if (!spares_in.empty() && same_layout) swaps_.push_back(StragglerStreaks::swap_of(pick.run, launch));
  pending_ = PendingSwap{pick.host, spares_in, pick.decided, last_step, 0};
}

// "rank 1 (dp 1, pp 0, ...)": where ranks sit in the job's grid (grid_position)
// (the smaller job's after a shrink), to find their stage.
std::string StragglerPolicy::ranks_in_grid(const std::set<int>& ranks, const GridShape& grid) const {
  std::string out;
  for (int k : ranks) {
    if (k < 0) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(k) + " (" + grid_position(grid, k) + ")";
  }
  return (ranks.size() > 1 ? "ranks " : "rank ") + out;
}

// The message for a run on ranks an earlier swap moved (run.follows): the
// swap did not cure them, and another would not either.
std::string StragglerPolicy::follows_text(int launch, const StragglerRun& run, const std::string& host,
                                          const std::string& swapped, const std::string& figures,
                                          const Allocation& alloc, const GridShape& grid) const {
  const StragglerSwap& s = *run.follows;
  const bool several = run.ranks.size() > 1;
  const bool out = alloc.excluded().count(swapped) > 0;
  return "launch " + std::to_string(launch) + ": " + ranks_in_grid(run.ranks, grid) + (several ? " are" : " is") +
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

// The job's straggler events of this launch since the last reading, fed to
// the streaks; the first host named in enough reports in a row that can be
// swapped (one of the launch's, with a spare left, while the job runs:
// can_swap) is returned with why. One that cannot is reported once
// (`straggler_kept`) and left; so is one on ranks an earlier swap moved
// (`straggler_follows_rank`), which is never swapped.
std::optional<StragglerPick> StragglerPolicy::read_reports(int launch, const Allocation& alloc,
                                                           const std::vector<std::string>& hosts,
                                                           const GridShape& grid, bool can_swap) {
  for (const nlohmann::json& e : read_jsonl_since(r_.run.dir + "/events.jsonl", &events_offset_)) {
    const std::optional<events::Straggler> s = events::read<events::Straggler>(e);
    // (none, or its lists of unequal lengths: not a report this supervisor understands)
    // (nor one without its step and window: consecutive windows are told by them)
    if (!s || events::head(e).launch != launch || s->step <= 0 || s->window_steps <= 0 || s->window <= 0 ||
        s->hosts.empty() || s->ratios.size() != s->hosts.size() || s->compute_ms.size() != s->hosts.size())
      continue;
    StragglerWindow w;
    w.step = s->step, w.window_steps = s->window_steps, w.first = s->window == 1;
    w.hosts = s->hosts, w.ratios = s->ratios, w.compute_ms = s->compute_ms;
    // (a report without ranks never follows a swap)
    for (double k : s->ranks) w.ranks.push_back((int)k);
    if (w.ranks.size() != w.hosts.size()) w.ranks.clear();
    for (const StragglerRun& run : streaks_->add(w)) {
      std::string figures;
      for (size_t i = 0; i < run.steps.size(); i++) {
        char b[96];
        std::snprintf(b, sizeof b, "%s step %ld %.2fx (%.1f ms/step)", i ? "," : "", run.steps[i], run.ratios[i],
                      run.compute_ms[i]);
        figures += b;
      }
      const std::string named = "named by " + std::to_string(run.steps.size()) +
                                " straggler reports in a row (supervisor.straggler_windows = " +
                                std::to_string(r_.supervisor.straggler_windows) + "; x what its stage should take:" +
                                figures + ")";
      const std::string h = alloc.find(run.host);
      const bool in_launch = std::find(hosts.begin(), hosts.end(), h) != hosts.end();
      std::vector<double> run_ranks;  // (-1: a report gave none)
      for (int k : run.ranks)
        if (k >= 0) run_ranks.push_back(k);
      events::StragglerRunFields rec{.host = run.host,
                                     .ranks = run_ranks,
                                     .steps = std::vector<double>(run.steps.begin(), run.steps.end()),
                                     .ratios = run.ratios,
                                     .compute_ms = run.compute_ms};
      if (run.follows) {  // reported even after the job ended; never swapped
        if (kept_.insert(run.host).second) {
          const std::string found = alloc.find(run.follows->host);
          const std::string was = found.empty() ? run.follows->host : found;
          rec.swapped_host = was, rec.swapped_launch = run.follows->launch, rec.swapped_step = run.follows->step;
          rec.standing = run.standing ? 1 : 0;
          events_.write(launch, follows_text(launch, run, h.empty() ? run.host : h, was, figures, alloc, grid),
                        events::StragglerFollowsRank{rec});
        }
        continue;
      }
      if (in_launch && !alloc.spares().empty()) {
        if (!can_swap) continue;  // the job has ended: nothing to stop
        events_.write(launch,
                      "launch " + std::to_string(launch) + ": host " + h + " " + named +
                          ": asking the job to checkpoint and stop, to swap it for a spare",
                      events::StragglerSwap{rec});
        return StragglerPick{h, "a straggler: " + named, run, wall_seconds()};
      }
      if (kept_.insert(run.host).second)
        events_.write(launch,
                      "launch " + std::to_string(launch) + ": host " + run.host + " " + named + "; " +
                          (in_launch ? "no spare left to swap in: the job goes on there"
                                     : "not one of the launch's hosts in the allocation: nothing to swap"),
                      events::StragglerKept{rec});
    }
  }
  return std::nullopt;
}

// The step a launch of `trainer train` began at: its launches.jsonl record
// among those appended since *offset (no clocks compared: rank 0's host
// keeps its own), or -1 before it wrote one.
long StragglerPolicy::first_step_since(long* offset) const {
  long first = -1;
  for (const nlohmann::json& l : read_jsonl_since(r_.run.dir + "/launches.jsonl", offset))
    if (l.contains("first_step") && l["first_step"].is_number_integer()) first = l["first_step"].get<long>();
  return first;
}

// The relaunch after a swap, resumed from step `first`, finished its first
// step: what the swap cost.
void StragglerPolicy::swap_done(int launch, long first) {
  PendingSwap& p = *pending_;
  p.resume_step = first;
  const long redone = std::max(0L, p.last_step - p.resume_step);
  const double seconds = wall_seconds() - p.decided;
  char b[320];
  std::snprintf(b, sizeof b,
                "the straggler %s swapped for %s: the first step on the new hosts %.1f s after the decision; %ld "
                "step(s) redone (the stopped job's last step %ld, resumed from step %ld)",
                p.host.c_str(), join(p.spares_in).c_str(), seconds, redone, p.last_step, p.resume_step);
  events_.write(launch, b,
                events::SwapDone{.host = p.host,
                                 .spares_in = p.spares_in,
                                 .seconds = seconds,
                                 .steps_redone = redone,
                                 .last_step = p.last_step,
                                 .resume_step = p.resume_step});
  pending_.reset();
}

}  // namespace trainer
