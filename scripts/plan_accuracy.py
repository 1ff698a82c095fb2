#!/usr/bin/env python3
"""How well `trainer plan --search` predicts what `trainer smoke` measures.

For a 4-rank and an 8-rank job of the demo model (4 layers, so interleaved
pipelines fit): `trainer smoke` runs each chosen layout five times, in
passes over the layouts, and before each pass `trainer calibrate` makes a
machine profile with that many ranks; `trainer plan --search --json
--profile P0,P1,...` prices every layout with each of them and takes the
median prediction (this host's speed drifts by tens of percent over
minutes, and one calibration sees one moment while the runs span many).
The table also gives the first calibration's prediction alone, and each
layout's ratio paired with each pass's own calibration (the median over the
passes of that pass's measured over its calibration's predicted step). The
layouts cover tp, sequence parallel, pp with 1f1b and interleaved, recompute
modes, micro-batch sizes and ZeRO-1, and spread over the search's ranking,
from near its top to its bottom: on 2 shared cores most layouts lie within
10% of each other, closer than the host's own drift
between passes, and no model can order those. Prints a markdown table of
measured and predicted step time and memory, each ratio, and per job the
Spearman rank correlation of the step times (the order the search gives
against the order measured).

usage: scripts/plan_accuracy.py [BUILD/trainer] [--steps N] [--jobs 4,8] [--reprice MEASUREMENTS]
Run from the repository root after scripts/build.sh; sources the MPI settings
of scripts/mpi_env.sh itself. Takes 17-24 minutes on 2 cores (--repeat 5).
The calibrations and smoke results go into a measurements.tar.gz it names at
the end; `--reprice` with that file (or its directory) prices the same
measurements again with the given trainer, running nothing (seconds): a
change to the cost model is then judged against the measurements the
earlier model was, not against another hour's noise. results/plan_accuracy/
holds the runs docs/PERFORMANCE.md reports.
"""
import argparse
import json
import os
from statistics import median
import shutil
import subprocess
import sys
import tarfile
import tempfile

RECIPE = "configs/demo.toml"
MODEL = ["model.n_layers=4"]

# (label for the table, --set lines); the search's labels are matched on these.
LAYOUTS = {
    4: [
        dict(dp=4, tp=1, pp=1, mb=4, rec="none"),
        dict(dp=4, tp=1, pp=1, mb=1, rec="full"),
        dict(dp=2, tp=2, pp=1, mb=1, rec="selective", sp=True),
        dict(dp=2, tp=1, pp=2, mb=1, rec="none", v=2),
        dict(dp=1, tp=1, pp=4, mb=1, rec="full"),
        dict(dp=1, tp=2, pp=2, mb=4, rec="selective", sp=True),
        dict(dp=2, tp=2, pp=1, mb=4, rec="none", zero=1),
        dict(dp=1, tp=1, pp=4, mb=4, rec="none"),
        dict(dp=1, tp=1, pp=4, mb=16, rec="none"),  # one micro-batch: the bubble is all but one stage's time
        dict(dp=1, tp=2, pp=2, mb=8, rec="full", v=2),
    ],
    8: [
        dict(dp=8, tp=1, pp=1, mb=2, rec="none"),
        dict(dp=8, tp=1, pp=1, mb=1, rec="full"),
        dict(dp=4, tp=2, pp=1, mb=4, rec="none", zero=1),
        dict(dp=4, tp=2, pp=1, mb=1, rec="selective", sp=True),
        dict(dp=2, tp=2, pp=2, mb=1, rec="none", v=2),
        dict(dp=4, tp=1, pp=2, mb=1, rec="full"),
        dict(dp=2, tp=1, pp=4, mb=1, rec="none"),
        dict(dp=1, tp=2, pp=4, mb=1, rec="full"),
        dict(dp=1, tp=2, pp=4, mb=8, rec="full", sp=True),
        dict(dp=2, tp=2, pp=2, mb=8, rec="full", zero=1),  # one micro-batch per step
    ],
}


def label(l):
    """The search's label of a layout (planning/layout_candidates.cpp)."""
    pp = l["pp"]
    sched = (" interleaved" if l.get("v", 1) > 1 else " 1f1b") if pp > 1 else ""
    return (f"dp {l['dp']} tp {l['tp']}{' sp' if l.get('sp') else ''} pp {pp}{sched} mb {l['mb']} "
            f"{l['rec']} zero {l.get('zero', 0)}")


def sets(l):
    v = l.get("v", 1)
    return [f"parallel.dp={l['dp']}", f"parallel.tp={l['tp']}", f"parallel.pp={l['pp']}",
            f"parallel.sequence_parallel={'true' if l.get('sp') else 'false'}",
            f"parallel.schedule=\"{'interleaved' if v > 1 else '1f1b'}\"", f"parallel.virtual_stages={v}",
            f"training.micro_batch={l['mb']}", f"recompute.mode=\"{l['rec']}\"", f"parallel.zero_stage={l.get('zero', 0)}"]


def with_sets(cmd, lines):
    for s in lines:
        cmd += ["--set", s]
    return cmd


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    return p.stdout


def spearman(a, b):
    def ranks(x):
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        i = 0
        while i < len(order):  # ties share their mean rank
            j = i
            while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb)


def calibrate(a, n, prof, env):
    """A profile of n ranks at `prof`; says how much the machine's speed moved while it ran and its anchor."""
    run(with_sets([a.mpirun, "-np", str(n), a.trainer, "calibrate", RECIPE, "--output", prof], MODEL), env)
    p = json.load(open(prof))
    print(f"calibrate {n} ranks ({os.path.basename(prof)}): speed moved {100 * p['speed_variation']:.0f}% between "
          f"passes; anchor {p['anchor_layout']}: {p['anchor_measured_ms']:.1f} ms measured, "
          f"{p['anchor_predicted_ms']:.1f} predicted; a pipeline action {p.get('action_ms', 0):.2f} ms "
          f"({p.get('action_layout', '')}: {p.get('action_measured_ms', 0):.1f} ms)", file=sys.stderr, flush=True)


def is_measurement(name):
    """The calibrations (profile_N_PASS.json) and smoke results (smoke_*.json) of a run."""
    return name.endswith(".json") and (name.startswith("smoke_") or name.count("_") == 2 and name.startswith("profile_"))


def pack_measurements(d):
    path = f"{d}/measurements.tar.gz"
    with tarfile.open(path, "w:gz") as t:
        for name in sorted(os.listdir(d)):
            if is_measurement(name):
                t.add(f"{d}/{name}", arcname=name)
    return path


def unpack_measurements(src, d):
    """An earlier run's measurements into d (nothing else is written where they came from)."""
    if os.path.isdir(src):
        for name in os.listdir(src):
            if is_measurement(name):
                shutil.copy(f"{src}/{name}", d)
        return
    with tarfile.open(src) as t:
        t.extractall(d, members=[m for m in t.getmembers() if m.isfile() and is_measurement(m.name)])


def without_action_cost(a, n, prof, env):
    """The calibration at `prof` as if calibrate had not measured a pipeline
    action's cost: action_ms 0, and the anchor's price re-taken without it
    (so its factor is what that model would have used)."""
    p = json.load(open(prof))
    if not p.get("action_ms"):
        return
    q = dict(p, action_ms=0.0, anchor_measured_ms=0.0, anchor_predicted_ms=0.0)  # no factor: the bare price
    json.dump(q, open(prof, "w"))
    p["anchor_predicted_ms"] = search(a, n, prof, prof + ".plan", env)[p["anchor_layout"]]["step_ms"]
    p["action_ms"] = 0.0
    json.dump(p, open(prof, "w"))


def search(a, n, prof, out, env):
    """plan --search's layouts by label."""
    run(with_sets([a.trainer, "plan", RECIPE, "--ranks", str(n), "--search", "--profile", prof, "--json", out],
                  MODEL), env)
    return {x["label"]: x for x in json.load(open(out))["layouts"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trainer", nargs="?", default="build/trainer")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--jobs", default="4,8")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--repeat", type=int, default=5,
                    help="passes over the layouts; each layout's figure is the median of its passes (the machine's "
                         "speed drifts over minutes on a shared host)")
    ap.add_argument("--reprice", metavar="MEASUREMENTS",
                    help="price an earlier run's calibrations and smoke results again (its measurements.tar.gz, or "
                         "a directory of those files); run nothing")
    ap.add_argument("--without-action-cost", action="store_true",
                    help="with --reprice: price as if calibrate had not measured a pipeline action's cost (the model "
                         "before it, on the same measurements)")
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")
    tmp = tempfile.mkdtemp(prefix="plan_accuracy_")
    try:
        return measure_and_report(a, env, tmp)
    finally:
        if a.reprice:  # a fresh run's directory holds its kept measurements; a re-pricing's only a copy of them
            shutil.rmtree(tmp, ignore_errors=True)


def measure_and_report(a, env, tmp):
    if a.reprice:
        unpack_measurements(a.reprice, tmp)
    worst_time, worst_paired, worst_mem, rho_min = 0.0, 0.0, 0.0, 1.0
    print("| ranks | layout | measured ms (each pass) | predicted ms | ratio | paired ratio | search rank | first "
          "calibration alone: predicted ms (ratio) | memory MB (rank 0) | plan MB | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in a.jobs.split(",")]:
        runs = {i: [] for i in range(len(LAYOUTS[n]))}
        profiles = []
        for rep in range(a.repeat):  # passes in turn, so a slow spell hits every layout alike
            profiles.append(f"{tmp}/profile_{n}_{rep}.json")
            if not a.reprice:
                calibrate(a, n, profiles[-1], env)  # one calibration per pass, over the same minutes as the runs
            elif a.without_action_cost:
                without_action_cost(a, n, profiles[-1], env)
            for i, l in enumerate(LAYOUTS[n]):
                out = f"{tmp}/smoke_{n}_{i}_{rep}.json"
                if not a.reprice:
                    run(with_sets([a.mpirun, "-np", str(n), a.trainer, "smoke", RECIPE, "--steps", str(a.steps),
                                   "--json", out], MODEL + sets(l)), env)
                runs[i].append(json.load(open(out)))
        searched = search(a, n, ",".join(profiles), f"{tmp}/plan_{n}.json", env)  # the median of their predictions
        # Each pass's calibration alone: the prediction a pass's runs are paired with.
        each_pass = [search(a, n, p, f"{p}.plan", env) for p in profiles]
        first = each_pass[0]  # one calibration's prediction
        measured, predicted, single = [], [], []
        for i, l in enumerate(LAYOUTS[n]):
            p = searched.get(label(l))
            if p is None:
                sys.exit(f"plan --search did not rank {label(l)}")
            m_ms = sorted(s["measured"]["step_ms"] for s in runs[i])[len(runs[i]) // 2]
            p_ms = p["step_ms"]
            mem = runs[i][0]["memory"]["total"]
            m_mb, p_mb = mem["measured_mb"], mem["plan_mb"]
            measured.append(m_ms)
            predicted.append(p_ms)
            single.append(first[label(l)]["step_ms"])
            paired = median(s["measured"]["step_ms"] / e[label(l)]["step_ms"] for s, e in zip(runs[i], each_pass))
            worst_paired = max(worst_paired, abs(paired - 1))
            worst_time = max(worst_time, abs(m_ms / p_ms - 1))
            worst_mem = max(worst_mem, abs(m_mb / p_mb - 1))
            each = "/".join(f"{s['measured']['step_ms']:.0f}" for s in runs[i])
            print(f"| {n} | {label(l)} | {m_ms:.1f} ({each}) | {p_ms:.1f} | {m_ms / p_ms:.2f} | {paired:.2f} | "
                  f"{p['rank']} of {len(searched)} | {single[-1]:.1f} ({m_ms / single[-1]:.2f}) | {m_mb:.1f} | "
                  f"{p_mb:.1f} | {m_mb / p_mb:.3f} |", flush=True)
        rho = spearman(measured, predicted)
        rho_min = min(rho_min, rho)
        rho1 = spearman(measured, single)
        worst1 = max(abs(m / p - 1) for m, p in zip(measured, single))
        print(f"| {n} | Spearman rank correlation of step times | | | {rho:.2f} | | | {rho1:.2f} (worst error "
              f"{100 * worst1:.0f}%) | | | |", flush=True)
    print(f"\nworst step-time error {100 * worst_time:.1f}% (limit 25%; paired with each pass's calibration "
          f"{100 * worst_paired:.1f}%), worst memory error {100 * worst_mem:.1f}% (limit 10%), lowest Spearman "
          f"{rho_min:.2f} (limit 0.8)")
    ok = worst_time <= 0.25 and worst_mem <= 0.10 and rho_min >= 0.8
    print("PASS" if ok else "FAIL")
    if not a.reprice:
        kept = pack_measurements(tmp)
        print(f"measurements kept in {kept}: `--reprice {kept}` prices them again", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
