#!/usr/bin/python3
"""The supervisor replaces a failed node from the allocation's spares (issue 49),
on scripts/fake_cluster.sh's hosts: three hosts, `launch.nodes = 2` (the third
a spare), data parallel over two; the second host's link is cut mid-run and
stays cut. The watchdogs end the job, the supervisor stops the launcher left
waiting on the cut host, blames that host (its ranks saw their link go down:
the watchdogs' network probes), excludes it, launches at once on the first
host and the spare (`mpirun --host`), and the run finishes with weights and
AdamW state bit-identical to an uncut run's. events.jsonl has one `replace`
event naming exactly the cut host and the spare, and `trainer status` shows it.
Then `health.check = true` with the second host capped at 10% of a core: the
job's health check stops it (exit 10) naming that host, the supervisor
replaces it with the spare, and the relaunch finishes.

Needs root and network namespaces; where they cannot be made it exits 77
(ctest: skipped) and says why. `down` removes the hosts also after a failure.

usage: spares_check.py TRAINER MPIEXEC
"""
import datetime
import json
import os
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEMO_RECIPE, check, cluster_up, fake_cluster as fc, finish,  # noqa: E402
                     run, same_tensors, small_demo, tensors)



def step_reached(run_dir, step):
    metrics = os.path.join(run_dir, "metrics.jsonl")
    return os.path.exists(metrics) and any(json.loads(l)["step"] >= step for l in open(metrics) if l.strip())


def replaced_on_spare(trainer, mpiexec, env, hosts, tmp):
    _, base = small_demo(trainer, tmp, steps=60)
    sets = base + ["--set", "parallel.pp=1", "--set", "parallel.tp=1", "--set", "model.n_layers=2",
                   "--set", "checkpoint.every=10", "--set", "runtime.comm_timeout=6", "--set", "parallel.zero_stage=1",
                   "--set", "supervisor.backoff=3", "--set", "supervisor.max_restarts=3"]
    straight = os.path.join(tmp, "straight")
    run([mpiexec, "-np", "2", "--host", f"{hosts[0]}:1,{hosts[2]}:1", trainer, "train", DEMO_RECIPE, *sets,
         "--set", f"run.dir={straight}"], env=env)

    rdir = os.path.join(tmp, "cut")
    log = {}

    def cutter():  # down at step 25 or later, for good
        t0 = time.time()
        while time.time() - t0 < 300 and not step_reached(rdir, 25):
            time.sleep(0.1)
        fc("cut", hosts[1], env=env)
        log["cut"] = time.time()

    listed = "[" + ", ".join(f'"{h}"' for h in hosts) + "]"
    t = threading.Thread(target=cutter)
    t.start()
    t0 = time.time()
    code, out = run([trainer, "supervise", DEMO_RECIPE, *sets, "--set", f"run.dir={rdir}",
                     "--set", f"launch.hosts={listed}", "--set", "launch.nodes=2", "--set", "launch.ranks=2"],
                    env=env, ok_codes=(0, 2, 5, 7))
    t.join()
    took = time.time() - t0
    events = [json.loads(l) for l in open(os.path.join(rdir, "events.jsonl"))]
    for e in events:
        if e["event"] not in ("start",):
            print("event:", e["event"], e["message"][:400])
    alloc = [e for e in events if e["event"] == "allocation"]
    check(len(alloc) == 1 and alloc[0]["hosts"] == hosts and alloc[0]["spares"] == [hosts[2]],
          f"the allocation: 3 hosts, each launch on 2, {hosts[2]} the spare ({[e['message'] for e in alloc]})")
    starts = [e for e in events if e["event"] == "start"]
    check(starts and f"--host {hosts[0]}:1,{hosts[1]}:1 " in starts[0]["command"],
          f"the first launch goes to {hosts[0]} and {hosts[1]} only (mpirun --host)")
    replace = [e for e in events if e["event"] == "replace"]
    check(len(replace) == 1 and replace[0]["excluded"] == [hosts[1]] and replace[0]["spares_in"] == [hosts[2]] and
          replace[0]["hosts"] == [hosts[0], hosts[2]] and "link " in replace[0]["why"] and
          replace[0]["resume_step"] >= 20,
          f"one replace event: exactly {hosts[1]} excluded (its link down), {hosts[2]} in, resuming from a "
          f"checkpoint of step 20 or later ({[e['message'] for e in replace]})")
    check(len(starts) >= 2 and f"--host {hosts[0]}:1,{hosts[2]}:1 " in starts[-1]["command"],
          f"the relaunch goes to {hosts[0]} and the spare {hosts[2]} only (mpirun --host)")
    exits = [e.get("code") for e in events if e["event"] == "exit"]
    check(code == 0 and exits[-1:] == [0] and 5 in exits,
          f"supervise exits 0 after a launch the watchdog ended (exit 5) and one on the spare (exits {exits}; "
          f"{took:.0f} s in all)")
    if len(starts) >= 2 and "cut" in log:
        relaunch = datetime.datetime.fromisoformat(starts[-1]["time"].replace("Z", "+00:00")).timestamp()
        print(f"figure: link cut to relaunch on the spare {relaunch - log['cut']:.1f} s "
              f"(runtime.comm_timeout 6 s, watchdog grace 3 s, launcher linger 15 s)")
    lingering = [e for e in events if e["event"] == "lingering"]
    print(f"note: the supervisor stopped a lingering launcher {len(lingering)} time(s)")
    final = os.path.join("checkpoints", "step_00000060")
    check(same_tensors(tensors(os.path.join(rdir, final)), tensors(os.path.join(straight, final))),
          "the finish on the spare: final weights and AdamW state bit-identical to an uncut run's")
    _, status = run([trainer, "status", rdir], ok_codes=(0, 1))
    check(f"{hosts[1]} excluded" in status or "replace" in status,
          f"trainer status shows the replacement: {[l for l in status.splitlines() if 'replace' in l or 'excluded' in l][:2]}")


def unfit_replaced(trainer, env, hosts, tmp):
    """health.check in the job: the second host, capped at 10% of a core, is found unfit
    (exit 10) and replaced by the spare; the relaunch trains to the end."""
    fc("restore", hosts[1], env=env)  # the cut of the check before
    _, base = small_demo(trainer, tmp, steps=6)
    rdir = os.path.join(tmp, "unfit")
    listed = "[" + ", ".join(f'"{h}"' for h in hosts) + "]"
    if fc("slow", hosts[1], "10", env=env).returncode != 0:
        print("note: slow is not available here: the health check's replacement is not checked")
        return
    try:
        code, out = run([trainer, "supervise", DEMO_RECIPE, *base, "--set", "parallel.pp=1", "--set", "parallel.tp=1",
                         "--set", "model.n_layers=2", "--set", f"run.dir={rdir}", "--set", "health.check=true",
                         "--set", "health.in_turn=true", "--set", "health.min_ratio=0.5",
                         "--set", f"launch.hosts={listed}", "--set", "launch.nodes=2", "--set", "launch.ranks=2"],
                        env=env, ok_codes=(0, 7, 10))
    finally:
        fc("restore", hosts[1], env=env)
    events = [json.loads(l) for l in open(os.path.join(rdir, "events.jsonl"))]
    unfit = [e for e in events if e["event"] == "unfit_node"]
    replace = [e for e in events if e["event"] == "replace"]
    exits = [e.get("code") for e in events if e["event"] == "exit"]
    print("\n".join(f"event: {e['event']}: {e['message'][:300]}" for e in unfit + replace))
    check(code == 0 and exits == [10, 0] and len(unfit) == 1 and unfit[0]["hosts"] == [hosts[1]] and
          len(replace) == 1 and replace[0]["excluded"] == [hosts[1]] and replace[0]["spares_in"] == [hosts[2]] and
          "health.check: " in replace[0]["why"],
          f"health.check finds {hosts[1]} (10% of a core) unfit, exit 10; the supervisor replaces it with "
          f"{hosts[2]} and the relaunch finishes (exits {exits}, supervise {code})")


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    env = cluster_up(3, "spares")
    try:
        hosts = fc("hosts", env=env).stdout.split()
        with tempfile.TemporaryDirectory() as tmp:
            replaced_on_spare(trainer, mpiexec, env, hosts, tmp)
        with tempfile.TemporaryDirectory() as tmp:
            unfit_replaced(trainer, env, hosts, tmp)
    finally:
        down = fc("down", env=env)
        check(down.returncode == 0, f"down: exit {down.returncode} {down.stderr.strip()[-300:]}")
    finish("spares")


if __name__ == "__main__":
    main()
