// `trainer train RECIPE.toml`: one rank of a (data-parallel) training job.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/memory_fit.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "app/recipe_keys.h"
#include "app/resume.h"
#include "app/train_loop.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hdf5_tensors.h"
#include "model/flops.h"
#include "model/param_registry.h"
#include "parallel/process_grid.h"
#include "app/fault.h"
#include "runtime/errors.h"
#include "runtime/crash_report.h"
#include "runtime/flight_recorder.h"
#include "runtime/metrics.h"
#include "runtime/replace_file.h"
#include "runtime/peak_cache.h"
#include "runtime/sgemm_peak.h"
#include "runtime/stop_signal.h"
#include "runtime/watchdog.h"

namespace trainer {

namespace {

const char* kTrainUsage =
    "usage: [mpirun -np N] trainer train RECIPE.toml [--set section.key=value ...]\n"
    "                                   [--resume PATH] [--start-over] [--print-config]\n"
    "       trainer train --keys | --keys-markdown\n"
    "  --set K=V        override a recipe key, e.g. --set training.steps=50 (repeatable;\n"
    "                   also --set=K=V, or --training.steps 50 as torchtitan spells it)\n"
    "  --resume PATH    resume from a checkpoint: a step directory, a checkpoint directory\n"
    "                   (its newest), its `latest` file; or auto (default) / none\n"
    "  --start-over     train from step 0 although [checkpoint] dir holds checkpoints: they\n"
    "                   are moved to <dir>/previous/<time>/ (nothing is deleted)\n"
    "  --print-config   print the resolved recipe, with notes on what would stop a launch,\n"
    "                   and exit (no mpirun or data needed)\n"
    "  --keys           every recipe key: default, allowed values, meaning\n"
    "Writes <run.dir>/metrics.jsonl and <run.dir>/recipe.resolved.toml.\n";

const RecipeArgsSpec kTrainArgs = {"train", kTrainUsage, {"--print-config", "--start-over", "--keys", "--keys-markdown"},
                                   {"--resume"}, false, false, {"--keys", "--keys-markdown"}};

RecipeArgs parse_args(int argc, char** argv) {
  RecipeArgs a = parse_recipe_args(kTrainArgs, argc, argv);
  if (a.has("--resume")) a.overrides.push_back("checkpoint.resume=" + toml_text(a.options["--resume"], KeyType::String));
  return a;
}

// --print-config, --keys and --help: no MPI, no data, no files written.
// A recipe error still fails (exit 2); what would stop a launch later (data
// files, the world size) is printed as a note.
int describe_only(const RecipeArgs& args) {
  if (args.help) return std::fputs(kTrainUsage, stdout), kExitOk;
  if (args.has("--keys") || args.has("--keys-markdown"))
    return std::fputs(describe_keys(args.has("--keys-markdown")).c_str(), stdout), kExitOk;
  const Recipe r = load_recipe(args.recipe, args.overrides, 0, false);
  std::fputs(recipe_to_toml(r).c_str(), stdout);
  for (const std::string& w : r.warnings) std::printf("# warning: %s\n", w.c_str());
  try {
    load_recipe(args.recipe, args.overrides, 0, true);
  } catch (const UserError& e) {
    std::printf("# note: a launch would stop here (exit %d): %s\n", e.exit_code, e.what());
  }
  std::printf("# launch: mpirun -np %d (dp %d x pp %d x tp %d)\n", r.grid.dp * r.grid.pp * r.grid.tp, r.grid.dp,
              r.grid.pp, r.grid.tp);
  return kExitOk;
}

// Runs fn on every rank. If any rank fails, the lowest failing rank prints its
// message once and every rank returns that rank's exit code, so a recipe or
// data error seen by all ranks is reported once, not N times.
int agree_on_failure(MPI_Comm world, const std::function<void()>& fn) {
  int rank = 0, code = 0;
  std::string msg;
  MPI_Comm_rank(world, &rank);
  try {
    fn();
  } catch (const UserError& e) {
    code = e.exit_code, msg = e.what();
  } catch (const std::exception& e) {
    code = kExitInternal, msg = std::string("internal error: ") + e.what();
  }
  int failed = code ? rank : INT_MAX, first = INT_MAX;
  MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, world);
  if (first == INT_MAX) return 0;
  MPI_Bcast(&code, 1, MPI_INT, first, world);
  if (rank == first) std::fprintf(stderr, "error: %s\n", msg.c_str());
  return code;
}

// A failure inside the training loop may hit one rank only (its slice of the
// data); the others would wait in a collective forever, so abort the job.
[[noreturn]] void abort_job(int code, const std::string& msg) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "error (rank %d): %s\n", rank, msg.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::string human(double x) {
  char b[32];
  if (x >= 1e9) std::snprintf(b, sizeof b, "%.2fG", x / 1e9);
  else if (x >= 1e6) std::snprintf(b, sizeof b, "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(b, sizeof b, "%.1fk", x / 1e3);
  else std::snprintf(b, sizeof b, "%.0f", x);
  return b;
}

// Rank 0's string, on every rank.
std::string broadcast_string(std::string s) {
  int n = (int)s.size();
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  s.resize(n);
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

struct Job {
  Recipe recipe;
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TokenDataset> train, val;
  std::unique_ptr<TrainLoop> loop;
  std::unique_ptr<MetricsLog> metrics;
  std::unique_ptr<FlightRecorder> recorder;  // every communication call of this rank
  std::unique_ptr<Watchdog> watchdog;
  FaultPlan faults;          // injected faults for this rank and launch
  double peak_gflops = 0;    // per rank
  std::string peak_source;   // where it came from, for the run header
  RunDirLocks locks;  // rank 0: this run owns run.dir and checkpoint.dir
  std::string resumed_from;  // checkpoint step directory, or empty
  long resumed_step = -1;

  // Users of the backend and communicators go first.
  void release() {
    watchdog.reset();
    metrics.reset();
    loop.reset();
    val.reset();
    train.reset();
    backend.reset();
    grid.reset();
  }
};

// Straggler report: every straggler_every steps all ranks share their mean
// compute time per step (step time minus time in communication calls, which
// is where fast ranks wait for slow ones). A rank slower than the median of
// the ranks doing the same work (its pipeline stage, when that has 3 or more
// ranks; else all ranks) by more than straggler_factor is named.
struct StragglerReport {
  std::vector<double> ranks, ms, ratios;  // world ranks named, their compute ms/step and ratio to their peers
  double worst_ratio = 0, median_ms = 0;  // median: over all ranks
};

StragglerReport find_stragglers(Job& job, double my_compute_ms) {
  const Recipe& r = job.recipe;
  Communicator& world = job.grid->world();
  const int n = world.size();
  std::vector<float> all(n);
  const float mine = (float)my_compute_ms;
  world.allgather(&mine, all.data(), 1);
  const double global = median_of(all);
  // Each pipeline stage's ranks, and the median they are compared with.
  std::vector<std::vector<float>> stage_times(r.grid.pp);
  for (int k = 0; k < n; k++) stage_times[grid_coords(r.grid, k).pp].push_back(all[k]);
  std::vector<double> stage_median(r.grid.pp);
  for (int p = 0; p < r.grid.pp; p++)
    stage_median[p] = stage_times[p].size() >= 3 ? median_of(stage_times[p]) : global;
  StragglerReport rep;
  rep.median_ms = global;
  for (int k = 0; k < n; k++) {
    const double med = stage_median[grid_coords(r.grid, k).pp];
    const double ratio = med > 0 ? all[k] / med : 0;
    rep.worst_ratio = std::max(rep.worst_ratio, ratio);
    if (ratio > r.runtime.straggler_factor) {
      rep.ranks.push_back(k);
      rep.ms.push_back(all[k]);
      rep.ratios.push_back(ratio);
    }
  }
  return rep;
}

// What rank 0 says the moment a stop signal arrives (runtime/stop_signal.h).
void note_newest_checkpoint(const std::string& newest) {
  set_stop_note("trainer: stop signal received: the ranks save a checkpoint at the end of this step and exit 75. "
                "If they are killed first (mpirun kills its ranks about a second after SIGTERM or Ctrl-C; send "
                "SIGUSR1 to mpirun to give them the time), " +
                (newest.empty() ? std::string("no checkpoint of this run was committed yet, so none is lost")
                                : "the newest committed checkpoint, " + newest + ", is intact: resume from it") +
                ".\n");
}

// Ranks of this job on this node (they share its cores and memory).
int ranks_on_node() {
  MPI_Comm node;
  int n = 1;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

// The per-rank sgemm peak MFU is relative to: runtime.peak_gflops, else the
// cached measurement for this machine and launch shape, else measured now
// (all ranks at once, as they will train; best of 1 s) and cached.
void find_peak(Job& job) {
  const Recipe& r = job.recipe;
  Communicator& world = job.grid->world();
  if (r.runtime.peak_gflops > 0) {
    job.peak_gflops = r.runtime.peak_gflops, job.peak_source = "runtime.peak_gflops";
    return;
  }
  const std::string key = peak_cache_key(r.runtime.threads, ranks_on_node());
  std::string when;
  double cached = world.rank() == 0 ? read_cached_peak(key, &when) : 0;
  world.broadcast(&cached, sizeof cached, 0);
  if (cached > 0) {
    job.peak_gflops = cached, job.peak_source = "cached " + when + " in " + peak_cache_path();
    return;
  }
  double g = measure_sgemm_gflops(*job.backend, 1024, 1.0);
  world.allreduce_sum(&g, 1);
  job.peak_gflops = g / world.size();
  const bool saved = world.rank() == 0 && write_cached_peak(key, job.peak_gflops);
  job.peak_source = std::string("measured now") + (saved ? ", cached in " + peak_cache_path() : "");
}

// At start-up: can checkpoint.dir hold keep + 1 checkpoints (the kept ones
// and the one being written)? Only a warning: space may be freed later, and
// a failed save is reported when it happens.
void warn_checkpoint_space(Job& job) {
  const CheckpointSection& ck = job.recipe.checkpoint;
  if (ck.every <= 0) return;
  double bytes = (double)job.loop->checkpoint_file_bytes();
  job.grid->world().allreduce_sum(&bytes, 1);
  if (job.grid->world().rank() != 0) return;
  const double free = (double)free_bytes(ck.dir);
  const long steps_to_save = job.recipe.training.steps / ck.every + 1;
  const long at_once = ck.keep > 0 ? std::min<long>(ck.keep + 1, steps_to_save) : steps_to_save;
  const long there = (long)committed_checkpoints(ck.dir).size();  // already on the disk
  const long more = std::max(1L, at_once - there);
  if (free >= more * bytes) return;
  std::fprintf(stderr,
               "warning: [checkpoint] dir %s has %.1f MB free; a checkpoint takes %.1f MB and this run holds up to "
               "%ld at once (checkpoint.keep = %d, plus the one being written), %ld more than now: %s\n",
               ck.dir.c_str(), free / 1e6, bytes / 1e6, at_once, ck.keep, more,
               free < bytes ? "not even the first one fits; saves will fail until space is freed"
                            : "later saves will fail unless space is freed (or lower checkpoint.keep)");
}

int run_training(Job& job, int world_rank, int world_size) {
  const Recipe& r = job.recipe;
  const bool lead = world_rank == 0;
  const double tokens_per_step = (double)r.training.global_batch * r.model.seq_len;
  const double flops_per_token = train_flops_per_token(r.model);
  const double peak_total = job.peak_gflops * 1e9 * world_size;
  size_t params_here = 0;
  for (auto& m : job.loop->chunks()) params_here += m->num_params();
  if (lead) {
    std::printf("trainer: %s | %s, %s params (%s/rank) | dp=%d pp=%d tp=%d%s%s | global batch %d x %d tokens, "
                "micro-batch %d, %d accumulation step(s) | %zu train samples | peak %.1f GFLOP/s/rank (%s)\n",
                r.run.name.c_str(), arch_name(r.model.arch), human((double)build_params(r.model).reg.total()).c_str(),
                human((double)params_here).c_str(),
                r.grid.dp, r.grid.pp, r.grid.tp, r.sequence_parallel ? " (sequence parallel)" : "",
                r.grid.pp == 1 ? "" : r.schedule == ScheduleKind::OneFOneB ? " 1f1b" : " interleaved",
                r.training.global_batch, r.model.seq_len,
                r.training.micro_batch, r.accum_steps(), job.train->num_samples(), job.peak_gflops, job.peak_source.c_str());
    std::fflush(stdout);
  }
  const auto t_start = std::chrono::steady_clock::now();
  double last_loss = 0, last_val = -1;
  const CheckpointSection& ck = r.checkpoint;
  TrainLoop& loop = *job.loop;
  Communicator& world = job.grid->world();
  // ckpt_kill faults: this process SIGKILLs itself at that commit point;
  // ckpt_hang: this rank stops before writing its file.
  const std::function<void(const char*)> fault = [&job, world_rank](const char* p) {
    const long at = job.loop->steps_done();
    for (const Fault* f : job.faults.at(Fault::CkptKill, at))
      if (f->point == p) std::raise(SIGKILL);
    if (std::string(p) == "writing" && !job.faults.at(Fault::CkptHang, at).empty()) {
      std::fprintf(stderr, "fault injection: rank %d stops in the checkpoint save of step %ld\n", world_rank, at);
      job.recorder->stop_here();
    }
  };
  // What this rank does between communication calls, for the flight recorder
  // (a rank that is behind is named with it).
  auto phase = [&job](const char* what, long step) {
    job.recorder->set_phase(what, step);
    crash_note(what, step);
  };
  // Rank 0 touches <run.dir>/heartbeat after every step: `trainer supervise`
  // reads its age to find a hung job.
  const std::string heartbeat = r.run.dir + "/heartbeat";
  auto beat = [&](long step) {
    if (lead) replace_file(heartbeat, std::to_string(step) + " " + std::to_string(wall_seconds()) + "\n", false);
  };
  beat(loop.steps_done());
  const long first = loop.steps_done();
  const long end = r.training.exit_after > 0 ? std::min(r.training.steps, first + r.training.exit_after)
                                             : r.training.steps;
  if (first >= r.training.steps && lead)
    std::printf("nothing to train: the run is at step %ld of training.steps = %ld\n", first, r.training.steps);
  long last_saved = job.resumed_step;  // a checkpoint of this step exists
  // The newest committed checkpoint, for messages and the stop note: at
  // start-up every checkpoint in ck.dir is the resumed one or older.
  std::string newest = job.resumed_from;
  auto committed = [&](const std::string& where) {
    if (where.empty()) return;
    newest = where;
    if (lead) note_newest_checkpoint(newest);
  };
  int rollbacks_in_a_row = 0;
  std::set<const Fault*> fired_once;  // nan and bad_batch faults: once per launch
  std::deque<double> recent_losses;  // applied steps, for the spike limit
  double window_compute_ms = 0;
  int window_steps = 0;
  // Waits for a background save in flight, so the newest checkpoint is final.
  auto finish_async = [&] {
    if (!ck.async || !loop.async_save_pending()) return;
    const std::string where = loop.poll_async_save(world, true);
    committed(where);
    if (!where.empty() && lead) std::printf("checkpoint: %s committed\n", where.c_str());
  };
  while (loop.steps_done() < end) {
    // Preemption: agree at the step boundary whether any rank got SIGTERM or
    // SIGUSR1; if so all save a checkpoint (synchronously) and exit with the
    // "requeue me" code.
    double sig = stop_signal();
    world.allreduce_max(&sig, 1);
    if (sig > 0) {
      try {
        phase("preemption checkpoint", loop.steps_done());
        finish_async();
        const long at = loop.steps_done();
        std::string where = "(already saved)";
        if (at != last_saved && at > 0)
          where = loop.save_checkpoint(ck.dir, ck.keep, world, recipe_to_toml(r), fault);
        if (lead)
          std::printf("preempted: %s received; checkpoint of step %ld %s; exiting with code %d (requeue me)\n",
                      strsignal((int)sig), at, where.c_str(), kExitPreempted);
      } catch (const UserError& e) {
        abort_job(e.exit_code, std::string("preemption checkpoint failed: ") + e.what());
      }
      std::fflush(stdout);
      return kExitPreempted;
    }
    const long next = loop.steps_done() + 1;
    phase("training", next);
    // Injected faults for the step about to run (app/fault.h).
    if (!job.faults.empty()) {
      if (!job.faults.at(Fault::Crash, next).empty()) {
        std::fprintf(stderr, "fault injection: rank %d crashes at step %ld\n", world_rank, next);
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
      if (!job.faults.at(Fault::Segv, next).empty()) {
        std::fprintf(stderr, "fault injection: rank %d gets SIGSEGV at step %ld\n", world_rank, next);
        std::fflush(stderr);
        std::raise(SIGSEGV);
      }
      if (!job.faults.at(Fault::Hang, next).empty()) {
        std::fprintf(stderr, "fault injection: rank %d stops before its next collective in step %ld\n",
                     world_rank, next);
        job.recorder->hang_at_next_call();
      }
      if (!job.faults.at(Fault::Freeze, next).empty()) {
        std::fprintf(stderr, "fault injection: rank %d freezes (SIGSTOP) inside its next collective in step %ld\n",
                     world_rank, next);
        job.recorder->freeze_in_next_collective();
      }
      // A NaN fires once per launch: a transient bad batch, which a rollback
      // to an earlier step must not meet again.
      for (const Fault* f : job.faults.at(Fault::Nan, next))
        if (fired_once.insert(f).second) loop.poison_next_step();
      for (const Fault* f : job.faults.at(Fault::BadBatch, next))
        if (fired_once.insert(f).second) loop.corrupt_next_step();
      loop.set_extra_compute_ms(job.faults.slow_ms(next));
    }
    StepStats st;
    double val = -1, ckpt_ms = -1;
    StragglerReport slow;
    bool straggler_report = false;
    try {
      // Loss spikes: a limit from the recent applied steps' median.
      const double median = r.training.spike_factor > 0 && (int)recent_losses.size() >= r.training.spike_window
                                ? median_of(std::vector<double>(recent_losses.begin(), recent_losses.end()))
                                : 0;
      loop.set_loss_limit(median > 0 ? r.training.spike_factor * median : std::numeric_limits<double>::infinity());
      st = loop.step();
      job.recorder->note_step(st.step);
      beat(st.step);
      if (!st.nonfinite && !st.spike) {
        recent_losses.push_back(st.loss);
        if ((int)recent_losses.size() > r.training.spike_window) recent_losses.pop_front();
      }
      if (st.nonfinite || st.spike) {
        // A bad step: its update was not applied; the recipe says what follows.
        const auto policy = st.nonfinite ? r.training.on_nan : r.training.on_spike;
        const char* key = st.nonfinite ? "training.on_nan" : "training.on_spike";
        char what[256];
        if (st.nonfinite)
          std::snprintf(what, sizeof what, "%s is %g (NaN/Inf)", !std::isfinite(st.loss) ? "loss" : "gradient norm",
                        !std::isfinite(st.loss) ? st.loss : st.grad_norm);
        else
          std::snprintf(what, sizeof what, "loss %.4f is a spike (above %g x %.4f, the median of the last %d steps; "
                        "training.spike_factor)", st.loss, r.training.spike_factor, median, r.training.spike_window);
        if (policy == TrainingSection::BadStep::Skip) {
          if (lead) std::fprintf(stderr, "warning: step %ld: %s; update skipped (%s = \"skip\")\n", st.step, what, key);
        } else {
          finish_async();
          const std::string to = policy == TrainingSection::BadStep::Rollback
                                     ? broadcast_string(lead ? newest_valid_checkpoint(ck.dir) : "")
                                     : "";
          if (to.empty() || ++rollbacks_in_a_row > 3) {
            if (lead)
              std::fprintf(stderr,
                           "error: step %ld: %s; the update was not applied. %s The newest checkpoint in %s is "
                           "what to resume from; %s = \"skip\" or \"rollback\" continue past bad batches.\n",
                           st.step, what,
                           policy == TrainingSection::BadStep::Stop
                               ? (std::string("Stopping (") + key + " = \"stop\").").c_str()
                               : to.empty() ? "No checkpoint to roll back to: stopping."
                                            : "Still bad after 3 rollbacks: stopping.",
                           ck.dir.c_str(), key);
            return kExitBadStep;
          }
          phase("rollback", st.step);
          const long skipped = loop.rollback(to);
          last_saved = loop.steps_done();
          if (lead)
            std::fprintf(stderr, "warning: step %ld: %s; rolled back to %s (step %ld) and skipped the "
                                 "%ld batch(es) since it (%s = \"rollback\")\n",
                         st.step, what, to.c_str(), loop.steps_done(), skipped, key);
          continue;
        }
      }
      const bool last = st.step == r.training.steps;
      if (job.val && ((r.training.eval_every > 0 && st.step % r.training.eval_every == 0) || last)) {
        phase("evaluation", st.step);
        val = loop.evaluate();
      }
      if (r.runtime.straggler_factor > 0) {
        window_compute_ms += st.step_ms - st.comm_ms();
        if (++window_steps == r.runtime.straggler_every) {
          slow = find_stragglers(job, window_compute_ms / window_steps);
          straggler_report = true;
          window_compute_ms = 0, window_steps = 0;
        }
      }
      const bool save_now = ck.every > 0 && (st.step % ck.every == 0 || last || st.step == end);
      const auto t0 = std::chrono::steady_clock::now();
      bool did = save_now;  // saved or committed this step: log ckpt_ms
      if (save_now || loop.async_save_pending()) phase(save_now ? "checkpoint save" : "checkpoint commit", st.step);
      try {
        // Async: commit a finished background save; before the next one, and
        // at the end of the run, wait for it. ckpt_ms is the blocking part.
        if (ck.async && loop.async_save_pending()) {
          const std::string where = loop.poll_async_save(world, save_now || st.step == end);
          if (!where.empty()) did = true;
          committed(where);
          if (!where.empty() && lead) std::printf("checkpoint: %s committed (written in the background)\n", where.c_str());
        }
        if (save_now && ck.async) {
          loop.start_async_save(ck.dir, ck.keep, world, recipe_to_toml(r));
          if (st.step == end) {
            const std::string where = loop.poll_async_save(world, true);
            committed(where);
            if (lead) std::printf("checkpoint: %s committed\n", where.c_str());
          }
        } else if (save_now) {
          const std::string where = loop.save_checkpoint(ck.dir, ck.keep, world, recipe_to_toml(r), fault);
          committed(where);
          if (lead) std::printf("checkpoint: step %ld saved to %s\n", st.step, where.c_str());
        }
        if (save_now) last_saved = st.step, rollbacks_in_a_row = 0;
        if (did) ckpt_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      } catch (const CheckpointError& e) {
        if (ck.required)
          throw CheckpointError("checkpoint of step " + std::to_string(st.step) + " failed (checkpoint.required = true): " + e.what());
        if (lead)
          std::fprintf(stderr, "warning: checkpoint of step %ld failed: %s. Training continues (checkpoint.required = "
                               "true makes this fatal); %s\n", st.step, e.what(),
                       newest.empty() ? "no checkpoint of this run is committed yet"
                                      : ("the newest committed checkpoint is " + newest).c_str());
      }
    } catch (const UserError& e) {
      abort_job(e.exit_code, e.what());
    } catch (const std::exception& e) {
      abort_job(kExitInternal, std::string("internal error: ") + e.what());
    }
    last_loss = st.loss;
    if (val >= 0) last_val = val;
    if (lead && straggler_report)
      for (size_t i = 0; i < slow.ranks.size(); i++)
        std::fprintf(stderr, "warning: step %ld: straggler: rank %d (dp %d, pp %d, tp %d) computed %.1f ms per step "
                             "over the last %d steps, %.2fx the median of the ranks doing the same work "
                             "(runtime.straggler_factor = %g; median of all ranks %.1f ms)\n",
                     st.step, (int)slow.ranks[i], grid_coords(r.grid, (int)slow.ranks[i]).dp,
                     grid_coords(r.grid, (int)slow.ranks[i]).pp, grid_coords(r.grid, (int)slow.ranks[i]).tp,
                     slow.ms[i], r.runtime.straggler_every, slow.ratios[i], r.runtime.straggler_factor,
                     slow.median_ms);
    const bool log = st.step % r.training.log_every == 0 || st.step == r.training.steps || st.step == 1;
    const bool named = straggler_report && !slow.ranks.empty();  // a quiet report does not force a line
    if (!lead || (!log && val < 0 && ckpt_ms < 0 && !named && !st.nonfinite && !st.spike)) continue;
    const double tps = tokens_per_step / (st.step_ms / 1e3);
    const double mfu = peak_total > 0 ? flops_per_token * tps / peak_total : 0;
    JsonRecord rec;
    rec.add("step", st.step).add("loss", st.loss).add("lr", st.lr).add("grad_norm", st.grad_norm)
        .add("tokens_per_s", tps).add("mfu", mfu).add("step_ms", st.step_ms)
        .add("data_wait_ms", st.data_wait_ms);
    if (st.nonfinite || st.spike) rec.add("update_skipped", 1);
    if (st.spike) rec.add("loss_spike", 1);
    if (val >= 0) rec.add("val_loss", val);
    if (ckpt_ms >= 0) rec.add("ckpt_ms", ckpt_ms);
    if (named)
      rec.add("stragglers", slow.ranks).add("straggler_compute_ms", slow.ms).add("straggler_ratio", slow.worst_ratio)
          .add("compute_ms_median", slow.median_ms);
    // Per pipeline stage: compute time, time waiting on pipeline receives (the
    // bubble inside the schedule), wall time of the schedule, most
    // micro-batches holding activations.
    rec.add("pp_compute_ms", st.stage_compute_ms).add("pp_wait_ms", st.stage_wait_ms)
        .add("pp_span_ms", st.stage_span_ms).add("pp_peak_in_flight", st.stage_peak_in_flight);
    // This rank's collectives in the step, per group and kind (rank 0's view;
    // every rank of a group moves the same bytes).
    for (const auto& [group, cc] :
         {std::pair{"dp", &st.comm_dp}, std::pair{"tp", &st.comm_tp}, std::pair{"pp", &st.comm_pp}})
      for (int k = 0; k < CommCounters::Other; k++) {
        const std::string key = std::string("comm_") + group + "_" + CommCounters::name(k);
        rec.add(key + "_bytes", cc->bytes[k]).add(key + "_ms", cc->ms[k]);
      }
    for (int k = 0; k < kMemKinds; k++)
      rec.add(std::string("mem_peak_") + mem_name((Mem)k) + "_mb", st.memory.peak[k] / 1048576.0);
    job.metrics->write(rec);
    std::printf("step %5ld/%ld | loss %.4f | lr %.2e | grad norm %.3f | %s tok/s | mfu %.1f%% | %.0f ms | data wait %.2f ms",
                st.step, r.training.steps, st.loss, st.lr, st.grad_norm, human(tps).c_str(),
                100 * mfu, st.step_ms, st.data_wait_ms);
    if (val >= 0) std::printf(" | val loss %.4f", val);
    std::printf("\n");
    std::fflush(stdout);
  }
  // Memory summary: the largest peak of any rank, per category.
  double peaks[kMemKinds + 1];
  const MemoryStats& ms = job.backend->memory();
  for (int k = 0; k < kMemKinds; k++) peaks[k] = (double)ms.peak[k];
  peaks[kMemKinds] = (double)ms.total_peak;
  job.grid->world().allreduce_max(peaks, kMemKinds + 1);
  if (lead) {
    std::printf("memory per rank (peak, largest over ranks):");
    for (int k = 0; k < kMemKinds; k++) std::printf(" %s %.1f MB", mem_name((Mem)k), peaks[k] / 1048576.0);
    std::printf(" | total %.1f MB\n", peaks[kMemKinds] / 1048576.0);
  }
  if (lead && first < r.training.steps) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    if (end < r.training.steps)
      std::printf("stopped after %ld steps (training.exit_after = %ld; %ld of %ld done) in %.1f s | loss %.4f", end - first,
                  r.training.exit_after, end, r.training.steps, secs, last_loss);
    else
      std::printf("done: %ld steps in %.1f s | final loss %.4f", end, secs, last_loss);
    if (last_val >= 0) std::printf(" | val loss %.4f", last_val);
    std::printf(" | metrics in %s/metrics.jsonl\n", r.run.dir.c_str());
  }
  return kExitOk;
}

}  // namespace

int cmd_train(int argc, char** argv) {
  for (int i = 0; i < argc; i++)
    for (const char* f : {"--print-config", "--keys", "--keys-markdown", "--help", "-h"})
      if (!std::strcmp(argv[i], f)) return describe_only(parse_args(argc, argv));
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  install_stop_signals(true);  // from here on SIGTERM/SIGUSR1/SIGINT mean "checkpoint and stop"
  install_dump_signal();   // and SIGUSR2 "write your flight recorder"
  // Set by `trainer supervise`: which launch this is (0 when unsupervised).
  const int launch = std::getenv("TRAINER_ATTEMPT") ? std::atoi(std::getenv("TRAINER_ATTEMPT")) : 0;

  RecipeArgs args;
  Job job;
  int code = agree_on_failure(MPI_COMM_WORLD, [&] {
    args = parse_args(argc, argv);
    // Set by `trainer supervise`: every launch resumes from the newest valid checkpoint.
    if (const char* resume = std::getenv("TRAINER_RESUME"))
      args.overrides.push_back(std::string("checkpoint.resume=\"") + resume + "\"");
    job.recipe = load_recipe(args.recipe, args.overrides, size, true);
    if (const char* spec = std::getenv("TRAINER_FAULT"))
      for (Fault& f : parse_faults(spec, "TRAINER_FAULT")) job.recipe.faults.push_back(std::move(f));
    if (rank == 0)
      for (const std::string& w : job.recipe.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  });
  // Rank 0 takes the run's directories and decides where training starts;
  // every rank then loads what it decided.
  if (code == 0) {
    code = agree_on_failure(MPI_COMM_WORLD, [&] {
      if (rank != 0) return;
      const Recipe& r = job.recipe;
      ensure_writable_dir(r.run.dir, "[run] dir");
      if (r.checkpoint.every > 0) ensure_writable_dir(r.checkpoint.dir, "[checkpoint] dir");
      const char* token = std::getenv("TRAINER_LOCK_TOKEN");  // set by `trainer supervise`
      lock_run_dirs(r, job.locks, token ? token : "");
      const ResumeDecision d = decide_resume(r, args.has("--start-over"));
      for (const std::string& n : d.notes) std::fprintf(stderr, "%s\n", n.c_str());
      job.resumed_from = d.from;
      note_newest_checkpoint(d.from);
    });
    if (code == 0) job.resumed_from = broadcast_string(job.resumed_from);
  }
  if (code == 0) {
    code = agree_on_failure(MPI_COMM_WORLD, [&] {
      const Recipe& r = job.recipe;
      if (r.runtime.memory_check) {  // before anything big is allocated
        const GridCoords at = grid_coords(r.grid, rank);
        const MemoryFit fit = check_memory_fit(r, at.pp, at.dp == 0, ranks_on_node());
        if (!fit.fits)
          throw RecipeError("rank " + std::to_string(rank) + " (pipeline stage " + std::to_string(at.pp) + ") " +
                            fit.message + " (runtime.memory_check = false skips this check)");
      }
      job.train = std::make_unique<TokenDataset>(r.data.train_files, r.model.seq_len, r.model.vocab_size);
      if (!r.data.val_files.empty())
        job.val = std::make_unique<TokenDataset>(r.data.val_files, r.model.seq_len, r.model.vocab_size);
      job.faults = FaultPlan(r.faults, rank, launch);
      // The flight recorder sees every call on every group; the job start
      // time tells this job's dumps from older ones.
      double job_start = wall_seconds();
      MPI_Bcast(&job_start, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      job.recorder = std::make_unique<FlightRecorder>(rank);
      job.recorder->set_job(job_start, launch);
      char crash_file[64];
      std::snprintf(crash_file, sizeof crash_file, "/flight/crash_rank_%05d.txt", rank);
      install_crash_report(r.run.dir + crash_file, rank, job_start);
      job.grid = std::make_unique<ProcessGrid>(MPI_COMM_WORLD, r.grid, job.recorder.get());
      job.backend = make_backend({r.runtime.backend, r.runtime.threads});
      job.loop = std::make_unique<TrainLoop>(*job.backend, groups_of(*job.grid), r, *job.train,
                                             job.val.get());
      if (!job.resumed_from.empty()) {
        job.loop->load_checkpoint(job.resumed_from);
        job.resumed_step = job.loop->steps_done();
      }
      warn_checkpoint_space(job);
      find_peak(job);
      job.backend->reset_memory_peaks();  // the sgemm measurement is not training
      if (rank == 0) {
        std::ofstream(r.run.dir + "/recipe.resolved.toml") << recipe_to_toml(r);
        // A resumed run appends to the log of the run it continues.
        job.metrics = std::make_unique<MetricsLog>(r.run.dir + "/metrics.jsonl", job.resumed_from.empty());
        if (!job.resumed_from.empty())
          std::printf("resumed from %s at step %ld\n", job.resumed_from.c_str(), job.loop->steps_done());
      }
    });
  }
  if (code == 0) {
    char dump[64];
    std::snprintf(dump, sizeof dump, "/flight/rank_%05d.json", rank);
    job.watchdog = std::make_unique<Watchdog>(*job.recorder, job.recipe.runtime.comm_timeout,
                                              job.recipe.run.dir + dump, 3.0, dump_requests);
    code = run_training(job, rank, size);
  }
  job.release();  // free communicators before MPI_Finalize
  MPI_Finalize();
  return code;
}

}  // namespace trainer
