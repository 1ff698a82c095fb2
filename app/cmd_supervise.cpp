// `trainer supervise RECIPE.toml`: launches the training job, watches it, and
// relaunches it from the newest valid checkpoint when it crashes or hangs.
// This file reads the command line and the recipe, finds the allocation,
// takes the run's locks and hands over to supervise/supervisor.h; the
// decisions below are supervise/decide.h's.
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
// job's nodes when launch.nodes picks from them; supervise/allocation.h) each
// launch goes to launch.nodes hosts that are not excluded, all of them or
// none; a failure the flight recorders or crash reports blame on a host
// (supervise/diagnosis.h), the job's health check, or a host whose ranks never
// started excludes that host for the rest of the run, and the next launch
// takes a spare at once and resumes from the newest checkpoint. With
// supervisor.on_straggler = "replace", a host the job's straggler reports
// name supervisor.straggler_windows reports in a row is swapped for a spare
// before it fails: the job is asked to checkpoint and stop (the preemption
// path), the host excluded, and the run resumes on the spare. When the
// ranks it swapped are named again on their new host, the slowness is
// theirs, not a host's: that is reported, and not swapped again.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/job_allocation.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "app/resume.h"
#include "runtime/errors.h"
#include "runtime/stop_signal.h"
#include "supervise/supervisor.h"

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

}  // namespace

int cmd_supervise(int argc, char** argv) {
  const RecipeArgs args = parse_recipe_args({"supervise", kSuperviseUsage, {}, {}, false, true}, argc, argv);
  if (args.help) return std::fputs(kSuperviseUsage, stdout), kExitOk;
  install_stop_signals(true);  // a stop during set-up: no launch, the requeue code (not exit 138)
  const Recipe r = load_recipe(args.recipe, args.overrides, 0, true);
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
  return supervise(r, {args.recipe, args.overrides, args.after_dashes}, std::move(alloc));
}

}  // namespace trainer
