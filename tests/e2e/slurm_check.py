#!/usr/bin/python3
"""A real single-node Slurm (munge, slurmctld, slurmd from Debian's packages,
started here and stopped at the end):
- `srun --mpi=pmix -n 8` runs an 8-rank (2x2x2) training run to the end;
- `sbatch scripts/slurm/train.sbatch`, stopped by each form of scancel:
  `--signal=USR1` (to the job's steps, what #SBATCH --signal=USR1@120 sends
  before the time limit), `--batch --signal=USR1` (to the batch shell only,
  what --signal=B:USR1@120 sends), `--full --signal=USR1` and `--full
  --signal=TERM` (to both): each time the ranks checkpoint and exit 75, the
  script requeues the job, the job runs again, resumes and finishes (exit 0),
  with final weights bit-identical to the srun run's;
- a plain `scancel` (SIGTERM to every process): the ranks save, and the job
  ends CANCELLED, not requeued;
- a hang under srun (rank 1 stops, watchdog off): the supervisor sees no
  heartbeat, asks the ranks (SIGUSR2 through srun) for their flight
  recorders, whose verdict names rank 1, has srun cancel the step,
  relaunches, and the run finishes.
Exits 77 (skipped) only where it cannot run Slurm at all: not root, or the
slurm-wlm / munge packages missing (scripts/setup.sh test installs them).

usage: slurm_check.py TRAINER_BINARY
"""
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEMO_RECIPE, ROOT, SLURM_COMMON, check, failures, same_tensors, small_demo,  # noqa: E402
                     start_munge, tensors)



def wait_for(pred, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.25)
    print(f"timed out after {timeout} s waiting for {what}")
    return False


def start_slurm(tmp, env):
    """munged (if not running) + slurmctld + slurmd on this host; returns pid files."""
    start_munge()
    host = socket.gethostname().split(".")[0]
    for d in ("state", "spool"):
        os.makedirs(os.path.join(tmp, d))
    conf = os.path.join(tmp, "slurm.conf")
    with open(conf, "w") as f:
        f.write(f"""ClusterName=trainer-test
SlurmctldHost={host}(127.0.0.1)
{SLURM_COMMON}StateSaveLocation={tmp}/state
SlurmdSpoolDir={tmp}/spool
SlurmctldPidFile={tmp}/slurmctld.pid
SlurmdPidFile={tmp}/slurmd.pid
SlurmctldLogFile={tmp}/slurmctld.log
SlurmdLogFile={tmp}/slurmd.log
NodeName={host} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    env["SLURM_CONF"] = conf
    subprocess.run(["slurmctld", "-f", conf], check=True, env=env)
    subprocess.run(["slurmd", "-f", conf], check=True, env=env)
    ok = wait_for(lambda: subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                                         env=env).stdout.strip() == "idle", 60, "the node to be idle")
    return ok, [os.path.join(tmp, "slurmctld.pid"), os.path.join(tmp, "slurmd.pid")]


def print_logs(tmp, env, job):
    """What Slurm said about a job that went wrong: its record and the daemons' log tails."""
    print(subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=env).stdout)
    for name in ("slurmctld.log", "slurmd.log"):
        path = os.path.join(tmp, name)
        if os.path.exists(path):
            print(f"--- {name} (last 40 lines)")
            print("\n".join(open(path, errors="replace").read().splitlines()[-40:]))


def stop_slurm(pidfiles):
    """SIGTERM to each daemon, then wait until it is gone (it writes its state on the way out)."""
    pids = []
    for pf in pidfiles:
        try:
            pids.append(int(open(pf).read().strip()))
            os.kill(pids[-1], 15)
        except (OSError, ValueError):
            pass

    def alive(pid):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
    wait_for(lambda: not any(alive(p) for p in pids), 30, "the Slurm daemons to stop")


def main():
    trainer = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0 or not shutil.which("slurmctld") or not shutil.which("munged"):
        print("skipped: needs root and Debian's slurm-wlm and munge (scripts/setup.sh test)")
        sys.exit(77)
    recipe = DEMO_RECIPE
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1", TRAINER=trainer)
        ok, pidfiles = start_slurm(tmp, env)
        try:
            check(ok, "single-node Slurm is up (slurmctld, slurmd, munge)")
            if not ok:
                print(open(os.path.join(tmp, "slurmctld.log")).read()[-3000:])
                sys.exit(1)
            data, base = small_demo(trainer, tmp, steps=40)
            base += ["--set", "checkpoint.every=5", "--set", "runtime.peak_gflops=100"]

            # srun: an 8-rank run.
            run_a = os.path.join(tmp, "srun")
            p = subprocess.run(["srun", "--mpi=pmix", "-n", "8", "--overcommit", trainer, "train", recipe, *base,
                                "--set", f"run.dir={run_a}"], capture_output=True, text=True, env=env, timeout=600)
            check(p.returncode == 0 and "dp=2 pp=2 tp=2" in p.stdout and "done: 40 steps" in p.stdout,
                  f"srun --mpi=pmix -n 8: the 2x2x2 run finished (exit {p.returncode})")
            if p.returncode:
                print(p.stdout[-3000:], p.stderr[-3000:])

            # sbatch + a stop signal, in every form Slurm can send it:
            # checkpoint, exit 75, requeue, resume, finish bit-identical to
            # the srun run; a plain scancel still cancels.
            def submit(name):
                run_dir, log = os.path.join(tmp, name), os.path.join(tmp, name + ".out")
                p = subprocess.run(["sbatch", "--parsable", f"--output={log}", "--ntasks=8",
                                    os.path.join(ROOT, "scripts/slurm/train.sbatch"), recipe, *base,
                                    "--set", f"run.dir={run_dir}"],
                                   capture_output=True, text=True, env=dict(env, TRAINER_SRUN_ARGS="--overcommit"),
                                   cwd=tmp)
                job = p.stdout.strip().split(";")[0]
                check(p.returncode == 0 and job.isdigit(),
                      f"{name}: sbatch accepted the job ({job or p.stderr.strip()})")
                beat = os.path.join(run_dir, "heartbeat")
                wait_for(lambda: os.path.exists(beat) and int(open(beat).read().split()[0] or 0) >= 3, 180,
                         "the job to reach step 3")
                return job, run_dir, log

            def state(job):
                out = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=env).stdout
                fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
                return fields.get("JobState", "?"), fields.get("Restarts", "0"), fields.get("ExitCode", "?")

            ended = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")

            def stepd_gone(job):
                return wait_for(lambda: subprocess.run(["pgrep", "-f", rf"slurmstepd: \[{job}\."],
                                                       capture_output=True).returncode != 0, 60,
                                "the job's slurmstepd to end")

            # (name, scancel options, lines the job's output must have)
            forms = [("steps-usr1", ["--signal=USR1"], []),  # what #SBATCH --signal=USR1@120 sends
                     ("batch-usr1", ["--batch", "--signal=USR1"],  # what #SBATCH --signal=B:USR1@120 sends
                      ["train.sbatch: SIGUSR1 received", "supervise: received User defined signal 1"]),
                     ("full-usr1", ["--full", "--signal=USR1"],
                      ["train.sbatch: SIGUSR1 received", "supervise: received User defined signal 1"]),
                     ("full-term", ["--full", "--signal=TERM"],
                      ["train.sbatch: SIGTERM received", "supervise: received Terminated"])]
            final_a = tensors(os.path.join(run_a, "checkpoints", "step_00000040"))
            for name, how, lines in forms:
                job, run_b, log = submit(name)
                subprocess.run(["scancel", *how, job], check=True, env=env)
                # The script requeues the job; Slurm holds a requeued job ~120 s
                # (BeginTime), so release it once it is pending again.
                # Release it only after the first run has left the node (its
                # slurmstepd gone): slurmd refuses to start a job id it still runs
                # or has just revoked, and the job would end FAILED.
                wait_for(lambda: (state(job)[1] != "0" and state(job)[0] == "PENDING") or state(job)[0] in ended,
                         180, "the requeue")
                if state(job)[0] == "PENDING":
                    stepd_gone(job)
                    time.sleep(2)
                    subprocess.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], env=env)
                wait_for(lambda: state(job)[0] in ended, 300, "the job to end")
                st, restarts, code = state(job)
                out = open(log).read() if os.path.exists(log) else ""
                print("\n".join(l for l in out.splitlines() if not l.startswith(("step ", "checkpoint: step"))))
                check("preempted: " in out and "checkpoint of step" in out and all(l in out for l in lines)
                      and "preempted with a checkpoint saved; requeueing job" in out,
                      f"{name}: scancel {' '.join(how)} made the ranks checkpoint and exit 75, and the script "
                      "requeued the job")
                if not check(st == "COMPLETED" and restarts == "1" and code == "0:0" and "restart count 1" in out
                             and "resumed from" in out and "done: 40 steps" in out,
                             f"{name}: the requeued job resumed and finished ({st}, restarts {restarts}, exit {code})"):
                    print_logs(tmp, env, job)
                check(same_tensors(final_a, tensors(os.path.join(run_b, "checkpoints", "step_00000040"))),
                      f"{name}: the final weights and AdamW state are bit-identical to the uninterrupted srun run's")
                stepd_gone(job)

            # A plain scancel cancels (SIGTERM to every process of the job):
            # the ranks save, the script does not bring the job back.
            job, run_b, log = submit("cancel")
            subprocess.run(["scancel", job], check=True, env=env)
            wait_for(lambda: state(job)[0] in ended or state(job)[1] != "0", 120, "the job to end")
            time.sleep(3)  # a wrong requeue would show by now
            st, restarts, _ = state(job)
            out = open(log).read() if os.path.exists(log) else ""
            print("\n".join(l for l in out.splitlines() if l.startswith(("train.sbatch:", "preempted:", "supervise:"))
                            and not l.startswith("supervise: launch 0: srun")))
            check(st == "CANCELLED" and restarts == "0" and "checkpoint of step" in out
                  and os.path.exists(os.path.join(run_b, "checkpoints", "latest")),
                  f"cancel: a plain scancel saved a checkpoint and the job stayed cancelled ({st}, restarts {restarts})")
            stepd_gone(job)

            # A hang under srun: the supervisor (inside an allocation) finds
            # the stale heartbeat, makes srun cancel the step, and relaunches.
            run_c = os.path.join(tmp, "hang")
            log = os.path.join(tmp, "hang.out")
            sup = [trainer, "supervise", recipe, *base, "--set", f"run.dir={run_c}", "--set", 'launch.launcher="srun"',
                   "--set", "launch.ranks=8", "--set", 'launch.args=["--overcommit"]', "--set", "supervisor.backoff=0.5",
                   "--set", 'fault.inject=["hang rank=1 step=4"]', "--set", "runtime.comm_timeout=0",
                   "--set", "supervisor.hang_timeout=15"]  # a relaunch's set-up counts too
            p = subprocess.run(["sbatch", "--parsable", "--ntasks=8", f"--output={log}", "--wrap",
                                " ".join(shlex.quote(a) for a in sup)], capture_output=True, text=True, env=env)
            job = p.stdout.strip().split(";")[0]
            wait_for(lambda: state(job)[0] in ended, 300, "the job to end")
            out = open(log).read() if os.path.exists(log) else ""
            print("\n".join(l for l in out.splitlines() if l.startswith(("supervise:", "srun:", "slurmstepd"))))
            left = subprocess.run(["pgrep", "-f", f"run.dir={run_c}"], capture_output=True, text=True).stdout.split()
            check(state(job)[0] == "COMPLETED" and "no heartbeat" in out and "CANCELLED" in out
                  and "launch 0: rank 1 is behind." in out
                  and "training finished after 2 launch(es)" in out and not left,
                  "srun hang: srun passed on SIGUSR2, the verdict names rank 1; the supervisor had the step "
                  "cancelled, relaunched and finished; no rank left behind")
        finally:
            stop_slurm(pidfiles)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
