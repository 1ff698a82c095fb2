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
supervisor's `trainer health` on all three hosts before the launch names that
host, the supervisor excludes it, and the launch on the first host and the
spare finishes. Then the second host's
link down before the launch: no rank starts, the supervisor stops the launch at
supervisor.start_timeout, finds the host where `trainer version` alone does not
run, and replaces it. Then the cut again
under Slurm (`up 3 --slurm`): `salloc -N 3` makes the allocation, the
supervisor reads its nodes (SLURM_JOB_NODELIST) and launches `srun -N 2
--nodelist=...`; the same checks (skipped, with the reason, where Slurm is
not installed).

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
from harness import (DEMO_RECIPE, check, fake_cluster as fc, fake_hosts, finish,  # noqa: E402
                     run, step_reached, same_tensors, small_demo, tensors)



def cut_sets(trainer, tmp):
    """The cut runs' --set arguments: 60 steps, checkpoints every 10, ZeRO-1 (each host writes its own file)."""
    _, base = small_demo(trainer, tmp, steps=60)
    return base + ["--set", "parallel.pp=1", "--set", "parallel.tp=1", "--set", "model.n_layers=2",
                   "--set", "checkpoint.every=10", "--set", "runtime.comm_timeout=6", "--set", "parallel.zero_stage=1",
                   "--set", "supervisor.backoff=3", "--set", "supervisor.max_restarts=3", "--set", "launch.nodes=2",
                   "--set", "launch.ranks=2"]


def replaced_on_spare(trainer, env, hosts, sets, straight, rdir, launcher):
    """A supervised run whose second host's link is cut at step 25 for good. mpirun: the hosts
    from launch.hosts; srun: from the allocation `salloc -N 3` makes (SLURM_JOB_NODELIST)."""
    log = {}

    def cutter():  # down at step 25 or later, for good
        t0 = time.time()
        while time.time() - t0 < 300 and not step_reached(rdir, 25):
            time.sleep(0.1)
        fc("cut", hosts[1], env=env)
        log["cut"] = time.time()

    if launcher == "mpirun":
        listed = "[" + ", ".join(f'"{h}"' for h in hosts) + "]"
        cmd = [trainer, "supervise", DEMO_RECIPE, *sets, "--set", f"run.dir={rdir}", "--set", f"launch.hosts={listed}"]
        place = lambda a, b: f"--host {a}:1,{b}:1 "  # noqa: E731
    else:  # whole nodes: a step left on the lost host does not hold the CPUs the next one needs
        cmd = ["salloc", "-N", "3", "--exclusive", trainer, "supervise", DEMO_RECIPE, *sets, "--set", f"run.dir={rdir}",
               "--set", "launch.launcher=srun"]
        place = lambda a, b: f"--nodelist={a},{b} "  # noqa: E731
    t = threading.Thread(target=cutter)
    t.start()
    t0 = time.time()
    code, out = run(cmd, env=env, ok_codes=(0, 1, 2, 5, 7))
    t.join()
    fc("restore", hosts[1], env=env)
    took = time.time() - t0
    if code != 0:
        print(out[-3000:])
    events = [json.loads(l) for l in open(os.path.join(rdir, "events.jsonl"))]
    for e in events:
        if e["event"] not in ("start",):
            print(f"event ({launcher}):", e["event"], e["message"][:400])
    alloc = [e for e in events if e["event"] == "allocation"]
    check(len(alloc) == 1 and alloc[0]["hosts"] == hosts and alloc[0]["spares"] == [hosts[2]],
          f"{launcher}: the allocation: 3 hosts, each launch on 2, {hosts[2]} the spare "
          f"({[e['message'] for e in alloc]})")
    starts = [e for e in events if e["event"] == "start"]
    check(starts and place(hosts[0], hosts[1]) in starts[0]["command"],
          f"{launcher}: the first launch goes to {hosts[0]} and {hosts[1]} only ({place(hosts[0], hosts[1])})")
    replace = [e for e in events if e["event"] == "replace"]
    check(len(replace) == 1 and replace[0]["excluded"] == [hosts[1]] and replace[0]["spares_in"] == [hosts[2]] and
          replace[0]["hosts"] == [hosts[0], hosts[2]] and "link " in replace[0]["why"] and
          replace[0]["resume_step"] >= 20,
          f"{launcher}: one replace event: exactly {hosts[1]} excluded (its link down), {hosts[2]} in, resuming "
          f"from a checkpoint of step 20 or later ({[e['message'] for e in replace]})")
    check(len(starts) >= 2 and place(hosts[0], hosts[2]) in starts[-1]["command"],
          f"{launcher}: the relaunch goes to {hosts[0]} and the spare {hosts[2]} only")
    exits = [e.get("code") for e in events if e["event"] == "exit"]
    check(code == 0 and exits[-1:] == [0] and 5 in exits,
          f"{launcher}: supervise exits 0 after a launch the watchdog ended (exit 5) and one on the spare "
          f"(exits {exits}; {took:.0f} s in all)")
    if len(starts) >= 2 and "cut" in log:
        relaunch = datetime.datetime.fromisoformat(starts[-1]["time"].replace("Z", "+00:00")).timestamp()
        print(f"figure ({launcher}): link cut to relaunch on the spare {relaunch - log['cut']:.1f} s "
              f"(runtime.comm_timeout 6 s, watchdog grace 3 s, launcher linger 3 s: the probes found the host cut off)")
    after = [e for e in events[events.index(replace[0]) + 1:] if e["event"] == "restart"][:1] if replace else []
    check(after and after[0]["restart"] == 0 and "not counted" in after[0]["message"],
          f"{launcher}: the relaunch on the spare is not counted against supervisor.max_restarts "
          f"({[e['message'] for e in after]})")
    lingering = [e for e in events if e["event"] == "lingering"]
    print(f"note ({launcher}): the supervisor stopped a lingering launcher {len(lingering)} time(s)")
    final = os.path.join("checkpoints", "step_00000060")
    check(same_tensors(tensors(os.path.join(rdir, final)), tensors(os.path.join(straight, final))),
          f"{launcher}: the finish on the spare: final weights and AdamW state bit-identical to an uncut run's")
    _, status = run([trainer, "status", rdir], ok_codes=(0, 1))
    check(f"{hosts[1]} excluded" in status,
          f"{launcher}: trainer status shows the replacement: "
          f"{[l for l in status.splitlines() if 'excluded' in l][:1]}")
    check(" 0 restart(s), 1 relaunch(es) on spares" in status,
          f"{launcher}: trainer status counts the relaunch on the spare apart from the restarts: "
          f"{[l for l in status.splitlines() if 'launch(es)' in l][:1]}")


def unfit_replaced(trainer, env, hosts, sets, tmp):
    """health.check = true with an allocation: before the launch the supervisor runs `trainer
    health` on all three hosts (the spare too); the second host, capped at 10% of a core, is
    found unfit and excluded, and the launch goes to the first host and the spare, which
    trains to the end with the job's own check off."""
    base = [a.replace("training.steps=60", "training.steps=6") for a in sets]
    rdir = os.path.join(tmp, "unfit")
    listed = "[" + ", ".join(f'"{h}"' for h in hosts) + "]"
    if fc("slow", hosts[1], "10", env=env).returncode != 0:
        print("note: slow is not available here: the health check's replacement is not checked")
        return
    try:
        code, out = run([trainer, "supervise", DEMO_RECIPE, *base, "--set", f"run.dir={rdir}",
                         "--set", "health.check=true", "--set", "health.in_turn=true", "--set", "health.min_ratio=0.5",
                         "--set", f"launch.hosts={listed}"], env=env, ok_codes=(0, 7, 10))
    finally:
        fc("restore", hosts[1], env=env)
    if code != 0:
        print(out[-3000:])
    events = [json.loads(l) for l in open(os.path.join(rdir, "events.jsonl"))]
    print("\n".join(f"event: {e['event']}: {e['message'][:300]}" for e in events if e["event"] != "start"))
    order = [e["event"] for e in events]
    checked = [e for e in events if e["event"] == "health_check"]
    unfit = [e for e in events if e["event"] == "unfit_node"]
    replace = [e for e in events if e["event"] == "replace"]
    starts = [e for e in events if e["event"] == "start"]
    exits = [e.get("code") for e in events if e["event"] == "exit"]
    check(len(checked) == 1 and checked[0]["hosts"] == hosts and f"{hosts[2]}:1" in checked[0]["command"],
          "the supervisor runs trainer health on every host, the spare too, one rank each")
    check(len(unfit) == 1 and unfit[0]["hosts"] == [hosts[1]] and len(replace) == 1 and
          replace[0]["excluded"] == [hosts[1]] and replace[0]["spares_in"] == [hosts[2]] and
          "health.check: " in replace[0]["why"] and "start" in order and order.index("replace") < order.index("start"),
          f"it finds {hosts[1]} (10% of a core) unfit and excludes it before the launch, the spare in "
          f"({[e['message'][:200] for e in replace]})")
    check(code == 0 and exits == [0] and len(starts) == 1 and f"--host {hosts[0]}:1,{hosts[2]}:1" in starts[0]["command"]
          and "health.check=false" in starts[0]["command"],
          f"the one launch runs on {hosts[0]} and {hosts[2]} (its own check off) and finishes "
          f"(exits {exits}, supervise {code})")


def never_started(trainer, env, hosts, sets, rdir):
    """The second host's link is down before the launch: mpirun starts no host's ranks (it
    fails at once: its daemon there cannot call back). The supervisor launches `trainer
    version` on each host alone, blames the one where that fails, and relaunches on the
    first host and the spare. (Under Slurm a node cut off before the allocation is Slurm's
    to find: slurmctld stops giving it out; not checked here.)"""
    base = [a.replace("training.steps=60", "training.steps=6") for a in sets]
    listed = "[" + ", ".join(f'"{h}"' for h in hosts) + "]"
    fc("cut", hosts[1], env=env)
    t0 = time.time()
    try:
        code, out = run([trainer, "supervise", DEMO_RECIPE, *base, "--set", f"run.dir={rdir}",
                         "--set", "supervisor.start_timeout=15", "--set", f"launch.hosts={listed}"],
                        env=env, ok_codes=(0, 1, 7, 137))
    finally:
        fc("restore", hosts[1], env=env)
    took = time.time() - t0
    if code != 0:
        print(out[-3000:])
    events = [json.loads(l) for l in open(os.path.join(rdir, "events.jsonl"))]
    shown = [e for e in events if e["event"] in ("not_started", "start_probe", "replace", "exit")]
    print("\n".join(f"event: {e['event']}: {e['message'][:400]}" for e in shown))
    probe = [e for e in events if e["event"] == "start_probe"]
    for h in probe[0]["failed"] if probe else []:
        log = os.path.join(rdir, "started", "launch_0", f"probe_{h}.log")
        print(f"note: {h}'s probe said: {open(log).read().strip()[-300:]}" if os.path.exists(log) else f"no {log}")
    replace = [e for e in events if e["event"] == "replace"]
    exits = [e.get("code") for e in events if e["event"] == "exit"]
    # mpirun starts no host's ranks until every host's daemon reported, and
    # here it fails at once: the probes find the host.
    check(len(probe) == 1 and probe[0]["failed"] == [hosts[1]] and len(probe[0]["results"]) == 3,
          f"mpirun: no rank started; `trainer version` alone, on the launch's hosts and the spare, fails on "
          f"{hosts[1]} only "
          f"({[e['results'] for e in probe]})")
    check(code == 0 and len(replace) == 1 and replace[0]["excluded"] == [hosts[1]] and
          replace[0]["spares_in"] == [hosts[2]] and "launched on it alone failed" in replace[0]["why"] and
          exits[-1:] == [0],
          f"mpirun: the host that cannot start is replaced by {hosts[2]} and the relaunch finishes "
          f"(exits {exits}, supervise {code}, {took:.0f} s in all)")


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        sets = cut_sets(trainer, tmp)
        straight = os.path.join(tmp, "straight")
        with fake_hosts(3, "spares") as (env, hosts):
            run([mpiexec, "-np", "2", "--host", f"{hosts[0]}:1,{hosts[2]}:1", trainer, "train", DEMO_RECIPE, *sets,
                 "--set", f"run.dir={straight}"], env=env)
            replaced_on_spare(trainer, env, hosts, sets, straight, os.path.join(tmp, "cut"), "mpirun")
            unfit_replaced(trainer, env, hosts, sets, tmp)
            never_started(trainer, env, hosts, sets, os.path.join(tmp, "never_started"))
        # The same under Slurm, in an allocation of the three hosts.
        with fake_hosts(3, "spares", slurm=True) as (env, hosts):
            if env:
                replaced_on_spare(trainer, env, hosts, sets, straight, os.path.join(tmp, "cut_slurm"), "srun")
    finish("spares")


if __name__ == "__main__":
    main()
