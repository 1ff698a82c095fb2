#!/usr/bin/python3
"""Two hosts made of network namespaces on this machine (a veth pair, TCP
between them; Open MPI starts the remote ranks through a plm_rsh_agent that
runs `ip netns exec HOST ...`), one rank each, data parallel:

- overlap: with the link rate-limited (tc tbf, 200 Mbit/s), the step's
  exposed data-parallel communication (comm_dp_exposed_ms) with buckets
  overlapping the backward is well below what it is without overlap, and
  the losses are bit-identical;
- a cut link: one host's link goes down mid-run under `trainer supervise`;
  the watchdog ends the job with exit 5, `trainer diagnose` finds every rank
  waiting in the same data-parallel all-reduce (no rank behind: the
  network), the link comes back, and the supervisor's relaunch finishes with
  weights and AdamW state bit-identical to an uncut run's.

Needs root and network namespaces; where they cannot be made it exits 77
(ctest: skipped) and says why. Everything it makes is removed at the end.

usage: multihost_check.py TRAINER MPIEXEC
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DEMO_RECIPE, check, finish, run, same_tensors, small_demo, tensors  # noqa: E402

TAG = str(os.getpid() % 100000)
HOSTS = [f"trh{i}n{TAG}" for i in range(2)]  # no "_": ORTE cannot route to such names
LINKS = [f"trv{i}n{TAG}" for i in range(2)]
NET = f"10.{100 + os.getpid() % 100}.{os.getpid() % 250}"


def sh(*cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p


def make_hosts():
    sh("ip", "netns", "add", HOSTS[0])
    sh("ip", "netns", "add", HOSTS[1])
    sh("ip", "link", "add", LINKS[0], "type", "veth", "peer", "name", LINKS[1])
    for i in range(2):
        sh("ip", "link", "set", LINKS[i], "netns", HOSTS[i])
        sh("ip", "-n", HOSTS[i], "addr", "add", f"{NET}.{i + 1}/24", "dev", LINKS[i])
        sh("ip", "-n", HOSTS[i], "link", "set", LINKS[i], "up")
        sh("ip", "-n", HOSTS[i], "link", "set", "lo", "up")


def remove_hosts():
    for h in HOSTS:
        sh("ip", "netns", "del", h, ok=False)


def limit_links(rate):
    for i in range(2):
        sh("ip", "netns", "exec", HOSTS[i], "tc", "qdisc", "replace", "dev", LINKS[i], "root", "tbf", "rate", rate,
           "burst", "32kbit", "latency", "50ms")


def launcher(tmp, mpiexec, supervised):
    """The command that starts 2 ranks, one per namespace host (supervised: passing on
    the variables `trainer supervise` sets for each launch)."""
    agent = os.path.join(tmp, "ns_agent.sh")
    open(agent, "w").write('#!/bin/sh\nhost=$1; shift\nexec ip netns exec "$host" sh -c "$*"\n')
    os.chmod(agent, 0o755)
    hostfile = os.path.join(tmp, "hosts")
    open(hostfile, "w").write("".join(f"{h} slots=1\n" for h in HOSTS))
    names = ["OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"]
    names += ["TRAINER_RESUME", "TRAINER_ATTEMPT"] if supervised else []
    env = [a for v in names for a in ("-x", v)]
    return ["ip", "netns", "exec", HOSTS[0], mpiexec, "--hostfile", hostfile, "-np", "2", "--map-by", "node",
            "--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include", f"{NET}.0/24",
            "--mca", "btl_tcp_if_include", f"{NET}.0/24", "--mca", "btl", "self,tcp", *env]


def records(run_dir):
    return [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]


def overlap(trainer, launch, base, tmp):
    limit_links("200mbit")
    runs = {}
    for on in (True, False):
        rdir = os.path.join(tmp, f"overlap_{on}")
        run(launch + [trainer, "train", DEMO_RECIPE, *base, "--set", f"run.dir={rdir}", "--set", "training.steps=8",
                      "--set", "training.global_batch=16", "--set", "training.micro_batch=8",
                      "--set", "parallel.dp_bucket_mb=1", "--set", f"parallel.dp_overlap={str(on).lower()}"])
        runs[on] = records(rdir)
    mean = {on: {k: statistics.mean(r[k] for r in runs[on][2:]) for k in
                 ("comm_dp_exposed_ms", "comm_dp_span_ms", "step_ms")} for on in runs}
    same = [r["loss"] for r in runs[True]] == [r["loss"] for r in runs[False]]
    print(f"figures: 200 Mbit/s link, dp 2 across 2 hosts, demo model, 1 MB buckets: overlap on: exposed "
          f"{mean[True]['comm_dp_exposed_ms']:.0f} ms, span {mean[True]['comm_dp_span_ms']:.0f} ms, step "
          f"{mean[True]['step_ms']:.0f} ms; off: exposed {mean[False]['comm_dp_exposed_ms']:.0f} ms, step "
          f"{mean[False]['step_ms']:.0f} ms (means of steps 3-8)")
    check(same and mean[True]["comm_dp_exposed_ms"] < 0.7 * mean[False]["comm_dp_exposed_ms"],
          f"overlap across hosts: exposed data-parallel communication {mean[True]['comm_dp_exposed_ms']:.0f} ms with "
          f"buckets overlapping the backward vs {mean[False]['comm_dp_exposed_ms']:.0f} ms without; losses "
          f"{'bit-identical' if same else 'DIFFER'}")
    for i in range(2):
        sh("ip", "netns", "exec", HOSTS[i], "tc", "qdisc", "del", "dev", LINKS[i], "root")


def cut_link(trainer, launcher_of, base, tmp):
    sets = base + ["--set", "training.steps=60", "--set", "checkpoint.every=10", "--set", "runtime.comm_timeout=6",
                   "--set", "supervisor.backoff=3", "--set", "model.n_layers=2"]
    straight = os.path.join(tmp, "straight")
    run(launcher_of() + [trainer, "train", DEMO_RECIPE, *sets, "--set", f"run.dir={straight}"])
    rdir = os.path.join(tmp, "cut")
    job = [trainer, "train", DEMO_RECIPE, *sets, "--set", f"run.dir={rdir}"]
    log = {}

    def cutter():
        # Down at step 25 or later; up again once a watchdog has dumped its
        # flight recorder (mpirun itself waits for the cut host before it exits).
        metrics, dump = os.path.join(rdir, "metrics.jsonl"), os.path.join(rdir, "flight", "rank_00000.json")
        t0 = time.time()
        while time.time() - t0 < 300:
            if os.path.exists(metrics) and any(json.loads(l)["step"] >= 25 for l in open(metrics) if l.strip()):
                break
            time.sleep(0.1)
        sh("ip", "-n", HOSTS[1], "link", "set", LINKS[1], "down")
        log["down"] = time.time()
        while time.time() - t0 < 300 and not (os.path.exists(dump) and os.path.getmtime(dump) > log["down"]):
            time.sleep(0.1)
        log["dump"] = time.time()
        sh("ip", "-n", HOSTS[1], "link", "set", LINKS[1], "up")

    t = threading.Thread(target=cutter)
    t.start()
    code, out = run([trainer, "supervise", DEMO_RECIPE, *sets, "--set", f"run.dir={rdir}", "--",
                     *launcher_of(True), *job],
                    ok_codes=(0, 7))
    t.join()
    events = [json.loads(l) for l in open(os.path.join(rdir, "events.jsonl"))]
    exits = [(e.get("code"), round(e.get("seconds", 0))) for e in events if e["event"] == "exit"]
    ended = log.get("dump", 1e9) - log.get("down", 0)
    check(code == 0 and len(exits) == 2 and exits[0][0] == 5 and exits[1][0] == 0 and ended < 6 + 10,
          f"cut link: the watchdog ends the job {ended:.1f} s after the cut (comm_timeout 6 s) with exit 5; the "
          f"supervisor's relaunch finishes (exits {exits})")
    diag = [e["message"] for e in events if e["event"] == "diagnosis"]
    check(diag and "no single rank is behind" in diag[0],
          f"cut link: the diagnosis finds every rank waiting in the same collective: {diag[:1]}")
    _, out = run([trainer, "diagnose", rdir], ok_codes=(0, 1, 2, 5))
    waiting = [l for l in out.splitlines() if "waiting" in l and "dp allreduce" in l]
    check(len(waiting) == 2, f"cut link: both ranks wait in a dp all-reduce ({len(waiting)} of 2 lines)")
    final = os.path.join("checkpoints", "step_00000060")
    check(same_tensors(tensors(os.path.join(rdir, final)), tensors(os.path.join(straight, final))),
          "cut link: after the relaunch the final weights and AdamW state are bit-identical to an uncut run's")


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    if os.geteuid() != 0:
        print("SKIP: needs root to make network namespaces")
        sys.exit(77)
    missing = [t for t in ("ip", "tc") if not shutil.which(t)]
    if missing:
        print(f"SKIP: {' and '.join(missing)} (iproute2) not installed: no network namespaces to make hosts of")
        sys.exit(77)
    try:
        make_hosts()
    except RuntimeError as e:
        remove_hosts()
        print(f"SKIP: network namespaces cannot be made here: {e}")
        sys.exit(77)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _, base = small_demo(trainer, tmp, steps=8)
            base += ["--set", "parallel.pp=1", "--set", "parallel.tp=1", "--set", "runtime.peak_gflops=100",
                     "--set", "training.log_every=1"]
            def launch(supervised=False):
                return launcher(tmp, mpiexec, supervised)
            overlap(trainer, launch(), base + ["--set", "model.n_layers=6"], tmp)
            cut_link(trainer, launch, base, tmp)
    finally:
        remove_hosts()
    finish("multi-host")


if __name__ == "__main__":
    main()
