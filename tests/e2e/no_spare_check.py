#!/usr/bin/python3
"""No spare left (issue 51), on two of scripts/fake_cluster.sh's three hosts with
`launch.nodes = 2`, data parallel over two, the second host's link cut at
step 25 (the watchdogs end the job, the supervisor blames and excludes that
host, and there is no spare to take its place):

- `supervisor.elastic = true`: the job shrinks to the first host, dp 2 -> 1
  with the same global batch (8 micro-batches per replica instead of 4),
  resumed through the resharding load; the finish's losses are within 1e-6
  relative of a plain dp 1 run resumed from the same checkpoint.
- `supervisor.spare_wait = 12` (elastic off), the link left cut: the
  supervisor checks the excluded host with `trainer health` every 4 s, and
  when the wait is over exits 7 saying what it waited for.
- the same with `supervisor.readmit = true` and the link back up a few
  seconds into the wait: the health check passes, the host is readmitted, the
  relaunch on both hosts finishes, bit-identical to an uncut run.
- all three hosts in the allocation (two per launch): the second host cut
  at step 25 (the third takes its place), the third cut at step 35 (no
  spare left), the second restored 3 s into the wait with readmit: each
  excluded host is checked on its own beside the usable one, so the third,
  still cut, fails only its own checks, the second is readmitted and the
  relaunch on the first two finishes.
- elastic with tp 2 across the two hosts (one rank each), the link cut at
  step 12: the host left holds no whole replica, so the shrink is refused
  and the supervisor exits 7 with the reason, launching nothing more (the
  refusal for memory is [U] Shrink.AShrinkThatWouldNotFitMemory...).

Needs root and network namespaces; where they cannot be made it exits 77
(ctest: skipped) and says why. `down` removes the hosts also after a failure.

usage: no_spare_check.py TRAINER MPIEXEC
"""
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEMO_RECIPE, check, fake_cluster as fc, fake_hosts, finish, losses,  # noqa: E402
                     run, step_reached, same_tensors, small_demo, tensors)


def event_seen(run_dir, kind):
    path = os.path.join(run_dir, "events.jsonl")
    return os.path.exists(path) and any(json.loads(l)["event"] == kind for l in open(path) if l.strip())


def cut_sets(trainer, tmp, hosts):
    """60 steps, checkpoints every 10, ZeRO-1, on the first two hosts, 2 ranks."""
    _, base = small_demo(trainer, tmp, steps=60)
    return base + ["--set", "parallel.pp=1", "--set", "parallel.tp=1", "--set", "model.n_layers=2",
                   "--set", "checkpoint.every=10", "--set", "runtime.comm_timeout=6", "--set", "parallel.zero_stage=1",
                   "--set", "supervisor.backoff=3", "--set", "supervisor.max_restarts=3", "--set", "launch.nodes=2",
                   "--set", "launch.ranks=2", "--set", f'launch.hosts=["{hosts[0]}", "{hosts[1]}"]',
                   "--set", "health.in_turn=true", "--set", "health.min_ratio=0.3"]


def supervise_cut(trainer, env, hosts, sets, rdir, extra, restore_after=None, cuts=((25, 1),), restore=None):
    """supervise with hosts[i]'s link cut once the run reaches step s, for each (s, i) of `cuts` in
    turn (the second host's at step 25); those of `restore` (default: all cut) restored
    `restore_after` s after the supervisor's first no_spare event (None: left cut). Returns (exit
    code, events)."""
    cut = [i for _, i in cuts]

    def cutter():
        t0 = time.time()
        for step, i in cuts:
            while time.time() - t0 < 300 and not step_reached(rdir, step):
                time.sleep(0.1)
            fc("cut", hosts[i], env=env)
        if restore_after is not None:
            while time.time() - t0 < 300 and not event_seen(rdir, "no_spare"):
                time.sleep(0.1)
            time.sleep(restore_after)
            for i in (cut if restore is None else restore):
                fc("restore", hosts[i], env=env)

    t = threading.Thread(target=cutter)
    t.start()
    try:
        code, out = run([trainer, "supervise", DEMO_RECIPE, *sets, "--set", f"run.dir={rdir}", *extra],
                        env=env, ok_codes=(0, 1, 2, 5, 7))
    finally:
        t.join()
        for i in cut:
            fc("restore", hosts[i], env=env)
    if code not in (0, 7):
        print(out[-3000:])
    events = [json.loads(l) for l in open(os.path.join(rdir, "events.jsonl"))]
    for e in events:
        if e["event"] not in ("start", "straggler"):
            print("event:", e["event"], e["message"][:300])
    return code, events


def shrunk(trainer, mpiexec, env, hosts, sets, straight, tmp):
    # The job's size from parallel.dp, not launch.ranks: the shrink sets launch.nodes for the job's own rules.
    sets = [("parallel.dp=2" if a == "launch.ranks=2" else a) for a in sets]
    rdir = os.path.join(tmp, "shrunk")
    code, events = supervise_cut(trainer, env, hosts, sets, rdir,
                                 ["--set", "supervisor.elastic=true", "--set", "checkpoint.keep=0"])
    shrink = [e for e in events if e["event"] == "shrink"]
    starts = [e for e in events if e["event"] == "start"]
    exits = [e.get("code") for e in events if e["event"] == "exit"]
    check(len(shrink) == 1 and shrink[0]["excluded"] == [hosts[1]] and shrink[0]["hosts"] == [hosts[0]] and
          shrink[0]["dp"] == 1 and shrink[0]["ranks"] == 1 and shrink[0]["accum_steps"] == 8 and
          shrink[0]["resume_step"] >= 20,
          f"elastic: {hosts[1]} excluded, no spare: shrunk to {hosts[0]} alone, dp 2 -> 1, 8 micro-batches per "
          f"step (global batch 16), from a checkpoint of step 20 or later ({[e['message'] for e in shrink]})")
    # The cut host is excluded on the watchdogs' network probes, or, where their dumps did not
    # name it (a loaded machine), by the start probe of one more launch on both hosts.
    check(code == 0 and exits[-1:] == [0] and 5 in exits and len(starts) in (2, 3) and
          f"--host {hosts[0]}:1 " in starts[-1]["command"] and "parallel.dp=1" in starts[-1]["command"] and
          "launch.nodes=1" in starts[-1]["command"],
          f"elastic: the relaunch runs one rank on {hosts[0]} with parallel.dp=1 (launch.nodes=1) and finishes "
          f"(exits {exits}, supervise {code})")
    if not shrink:
        return
    # The same checkpoint resumed by a plain dp 1 run.
    step_dir = f"step_{shrink[0]['resume_step']:08d}"
    ref = os.path.join(tmp, "shrunk_reference")
    shutil.copytree(os.path.join(rdir, "checkpoints", step_dir), os.path.join(ref, "checkpoints", step_dir))
    open(os.path.join(ref, "checkpoints", "latest"), "w").write(step_dir + "\n")
    run([mpiexec, "-np", "1", "--host", f"{hosts[0]}:1", trainer, "train", DEMO_RECIPE, *sets,
         "--set", f"run.dir={ref}", "--set", "parallel.dp=1", "--set", "launch.nodes=1"],
        env=dict(env, TRAINER_RESUME="auto"))
    mine, theirs = losses(rdir), losses(ref)
    later = sorted(s for s in theirs if s > shrink[0]["resume_step"])
    differ = [s for s in later if abs(mine.get(s, float("nan")) - theirs[s]) > 1e-6 * abs(theirs[s])]
    check(later and len(later) == 60 - shrink[0]["resume_step"] and not differ,
          f"elastic: the finish's {len(later)} losses after the resume within 1e-6 of a dp 1 run resumed from "
          f"{step_dir} (differing at {differ[:5]})")
    # The same samples in the same order as the uncut dp 2 run (its sums differ in order only: 1e-3).
    uncut = losses(straight)
    off = max((abs(mine[s] - uncut[s]) / abs(uncut[s]) for s in later if s in mine), default=1)
    check(off < 1e-3, f"elastic: the same samples in the same order as the uncut dp 2 run (losses within "
                      f"{off:.1e} relative after the resume)")


def one_back_one_out(trainer, env, hosts, sets, tmp):
    # All three hosts in the allocation, two per launch: the second host cut at step 25 (the spare
    # takes its place), the spare cut at step 35 (no spare left: the wait), the second host back 3 s
    # into the wait while the spare stays cut.
    three = {f'launch.hosts=["{hosts[0]}", "{hosts[1]}"]': "launch.hosts=[" + ", ".join(f'"{h}"' for h in hosts) + "]"}
    sets = [three.get(a, a) for a in sets]
    rdir = os.path.join(tmp, "one_back_one_out")
    code, events = supervise_cut(trainer, env, hosts, sets, rdir,
                                 ["--set", "supervisor.spare_wait=60", "--set", "supervisor.spare_check_every=4",
                                  "--set", "supervisor.readmit=true"],
                                 restore_after=3, cuts=((25, 1), (35, 2)), restore=(1,))
    kinds = [e["event"] for e in events]
    wait = events[kinds.index("no_spare"):] if "no_spare" in kinds else []
    checked = {e.get("host") for e in wait if e["event"] == "health_check"}
    failed = {e.get("host") for e in wait if e["event"] == "health_failed"}
    readmit = [e["host"] for e in wait if e["event"] == "readmit"]
    starts = [e for e in wait if e["event"] == "start"]
    check(code == 0 and {hosts[1], hosts[2]} <= checked and hosts[2] in failed and readmit == [hosts[1]] and
          len(starts) == 1 and kinds.index("readmit") < kinds.index("start", kinds.index("no_spare")) and
          f"--host {hosts[0]}:1,{hosts[1]}:1" in starts[0]["command"] and kinds[-1] == "done",
          f"one back, one still out: each excluded host is checked on its own beside the usable one "
          f"({sorted(h for h in checked if h)}); the spare, still cut, fails its own checks "
          f"({sorted(h for h in failed if h)}) and keeps the second host out no longer: readmitted {readmit}, the "
          f"relaunch on {hosts[0]} and {hosts[1]} finishes (supervise {code}; {[e['message'][:200] for e in wait[-3:]]})")


def refused(trainer, env, hosts, sets, tmp):
    # One rank per host and tp 2 across the two: the host left holds no whole replica.
    sets = [("parallel.tp=2" if a == "parallel.tp=1" else a) for a in sets]
    rdir = os.path.join(tmp, "refused")
    code, events = supervise_cut(trainer, env, hosts, sets, rdir, ["--set", "supervisor.elastic=true"], cuts=((12, 1),))
    no_spare = [e for e in events if e["event"] == "no_spare"]
    why = no_spare[0].get("shrink_refused", "") if no_spare else ""
    kinds = [e["event"] for e in events]
    check(code == 7 and len(no_spare) == 1 and "not a multiple of one replica's pp x cp x tp = 2" in why and
          "cannot shrink" in no_spare[0]["message"] and kinds.count("start") in (1, 2) and
          "start" not in kinds[kinds.index("no_spare"):] and "shrink" not in kinds,
          f"elastic, refused: tp 2 across both hosts cannot shrink to one; exit 7 with the reason, nothing "
          f"relaunched (supervise {code}; {no_spare[0]['message'] if no_spare else kinds})")


def waited(trainer, env, hosts, sets, tmp):
    rdir = os.path.join(tmp, "waited")
    t0 = time.time()
    code, events = supervise_cut(trainer, env, hosts, sets, rdir,
                                 ["--set", "supervisor.spare_wait=12", "--set", "supervisor.spare_check_every=4"])
    kinds = [e["event"] for e in events]
    no_spare = [e for e in events if e["event"] == "no_spare"]
    checks = kinds[kinds.index("no_spare"):].count("health_check") if no_spare else 0
    took = re.search(r"waited (\d+) s", events[-1]["message"]) if events else None
    check(code == 7 and len(no_spare) == 1 and "waiting up to 12 s" in no_spare[0]["message"] and checks >= 2 and
          kinds[-1] == "give_up" and took and int(took.group(1)) >= 12 and hosts[1] in events[-1]["message"] and
          "start" not in kinds[kinds.index("no_spare"):],
          f"spare_wait: the supervisor waits 12 s, checking the excluded host {checks} times, launches nothing "
          f"and exits 7 saying what it waited for (supervise {code} after {time.time() - t0:.0f} s; "
          f"{events[-1]['message'] if events else ''})")


def readmitted(trainer, env, hosts, sets, straight, tmp):
    rdir = os.path.join(tmp, "readmitted")
    code, events = supervise_cut(trainer, env, hosts, sets, rdir,
                                 ["--set", "supervisor.spare_wait=120", "--set", "supervisor.spare_check_every=4",
                                  "--set", "supervisor.readmit=true"], restore_after=3)
    kinds = [e["event"] for e in events]
    readmit = [e for e in events if e["event"] == "readmit"]
    starts = [e for e in events if e["event"] == "start"]
    start_at = [i for i, k in enumerate(kinds) if k == "start"]
    # (Three launches where the cut host was excluded by the next launch's start probe.)
    check(code == 0 and len(readmit) == 1 and readmit[0]["host"] == hosts[1] and len(starts) in (2, 3) and
          start_at[-2] < kinds.index("readmit") < start_at[-1] and
          f"--host {hosts[0]}:1,{hosts[1]}:1" in starts[-1]["command"],
          f"readmit: the link back, {hosts[1]} passes trainer health, is readmitted and the relaunch runs on both "
          f"hosts and finishes (supervise {code}; {[e['message'] for e in readmit]})")
    final = os.path.join("checkpoints", "step_00000060")
    check(same_tensors(tensors(os.path.join(rdir, final)), tensors(os.path.join(straight, final))),
          "readmit: final weights and AdamW state bit-identical to an uncut run's")


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp, fake_hosts(3, "no_spare") as (env, hosts):
        sets = cut_sets(trainer, tmp, hosts)
        straight = os.path.join(tmp, "straight")
        run([mpiexec, "-np", "2", "--host", f"{hosts[0]}:1,{hosts[1]}:1", trainer, "train", DEMO_RECIPE, *sets,
             "--set", f"run.dir={straight}"], env=env)
        shrunk(trainer, mpiexec, env, hosts, sets, straight, tmp)
        refused(trainer, env, hosts, sets, tmp)
        waited(trainer, env, hosts, sets, tmp)
        readmitted(trainer, env, hosts, sets, straight, tmp)
        one_back_one_out(trainer, env, hosts, sets, tmp)
    finish("no_spare")


if __name__ == "__main__":
    main()
