#!/usr/bin/env python3
"""`trainer calibrate`, `trainer plan --search` and `trainer smoke` through the
real binary: the profile has what the cost model reads; the search ranks
layouts (with several profiles, at the median of their predictions), names
why others were rejected and writes them as JSON; `plan --nodes` prices the
job supervisor.elastic would run on fewer nodes; smoke leaves
the run's directories alone, measures memory as the plan predicts it, passes
an unchanged rerun against its own baseline and fails (exit 9, one line) on a
deliberate slowdown (a `slow` fault) and below --min-mfu, reports each
pipeline stage's compute and wait as its kept run's metrics give them;
missing data means synthetic tokens.

usage: smoke_check.py TRAINER MPIRUN
"""
import json
import os
import re
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DEMO_RECIPE, check, finish, run, small_demo  # noqa: E402


def median(v):
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


def check_stages(j, tmp, out):
    """Per stage, smoke's compute and pipeline wait are the medians of the kept run's metrics over the measured
    steps; the prediction's stages end within its step."""
    kept = [d for d in os.listdir(tmp) if d.startswith("trainer-smoke-")]
    steps = {}
    for line in open(os.path.join(tmp, kept[0], "run", "metrics.jsonl")) if len(kept) == 1 else []:
        r = json.loads(line)
        if "pp_compute_ms" in r and r["step"] > j["warmup"]:
            steps[r["step"]] = r  # a step logged twice (a restart) counts once, as its latest
    want = [tuple(median([r[k][s] for r in steps.values()]) for k in ("pp_compute_ms", "pp_wait_ms"))
            for s in range(2)] if steps else []
    got = [(x["compute_ms"], x["wait_ms"]) for x in j["measured"]["stages"]]
    pred = j["predicted"]
    ends = [x["compute_ms"] + x["wait_ms"] for x in pred["stages"]]
    same = len(want) == len(got) == 2 and all(abs(a - b) < 1e-3 for w, g in zip(want, got) for a, b in zip(w, g))
    check(len(steps) == 4 and same and len(ends) == 2 and all(x["compute_ms"] > 0 for x in pred["stages"])
          and max(ends) <= pred["step_ms"] + 1e-6
          and "stages (ms) compute/pipeline wait per stage, measured (predicted): 0 " in out,
          f"smoke: per stage compute/wait {[(round(a), round(b)) for a, b in got]} ms, the medians of the kept run's "
          f"metrics {[(round(a), round(b)) for a, b in want]}; predicted ends {[round(e) for e in ends]} ms within "
          f"its step of {pred['step_ms']:.0f}")
    for d in kept:
        shutil.rmtree(os.path.join(tmp, d))


def main():
    trainer, mpirun = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="smoke_check_")
    data, sets = small_demo(trainer, tmp, 6)
    sets += ["--set", f'run.dir="{tmp}/never"', "--set", f'checkpoint.dir="{tmp}/never_ckpt"']
    env = dict(os.environ, TMPDIR=tmp)

    prof = os.path.join(tmp, "profile.json")
    run([mpirun, "-np", "2", trainer, "calibrate", DEMO_RECIPE, "--output", prof] + sets, env=env)
    p = json.load(open(prof))
    sync = p["tp_sync"].get("2", [])  # the demo's 6 heads split over 2 ranks
    check(p["format"] == "trainer-machine-profile/3" and len(p["busy_slowdown"]) == 2
          and any(k.startswith("matmul ") for k in p["ops"]) and "allreduce/2" in p["collectives"]
          and p["gemm_gflops"] > 0 and len(sync) == 3 and all(a[0] < b[0] for a, b in zip(sync, sync[1:]))
          and all(s[1] >= 0 for s in sync),
          f"calibrate: {len(p['ops'])} op shapes, collectives {sorted(p['collectives'])}, "
          f"GEMM {p['gemm_gflops']:.1f} GFLOP/s, slowdown by busy ranks {p['busy_slowdown']}, "
          f"tensor-parallel waits {sync}")
    check(p["anchor_layout"].startswith("dp 2 tp 1 pp 1 ") and p["anchor_measured_ms"] > 0
          and p["anchor_predicted_ms"] > 0 and p["action_layout"].startswith("dp 1 tp 1 pp 2 ")
          and p["action_layout"].endswith(" mb 1 none zero 0") and p["action_measured_ms"] > 0
          and 0 <= p["action_ms"] <= 20 and not [d for d in os.listdir(tmp) if d.startswith("trainer-smoke-")],
          f"calibrate's real steps: {p['anchor_layout']} took {p['anchor_measured_ms']:.1f} ms, predicted "
          f"{p['anchor_predicted_ms']:.1f} ms; {p['action_layout']} {p['action_measured_ms']:.1f} ms, so a pipeline "
          f"action costs {p['action_ms']:.2f} ms beyond its ops; their scratch directories removed")

    plan = os.path.join(tmp, "plan.json")
    _, out = run([trainer, "plan", DEMO_RECIPE, "--ranks", "2", "--search", "--profile", prof, "--json", plan,
                  "--price-per-rank-hour", "1.5"] + sets)
    j = json.load(open(plan))
    times = [x["step_ms"] for x in j["layouts"]]
    check(len(j["layouts"]) >= 10 and times == sorted(times) and "use #1: --set parallel.dp=" in out
          and "$" in out, f"plan --search: {len(j['layouts'])} layouts ranked by step time, cost and --set lines")
    check(j["rejected"] and all(x["why"] for x in j["rejected"]) and "rejected:" in out,
          f"plan --search: {len(j['rejected'])} rejected with a reason each, e.g. {j['rejected'][0]['why']}")
    code, out = run([trainer, "plan", DEMO_RECIPE, "--ranks", "2", "--search"] + sets, ok_codes=(2,))
    check("trainer calibrate" in out, "plan --search without --profile: exit 2, says how to make one")
    # plan --nodes: what supervisor.elastic would run on 1 of the job's 2 nodes (dp 2 -> 1, twice the
    # micro-batches per replica, no gradient reduction), priced by the same profile.
    elastic = ["--set", "parallel.pp=1", "--set", "parallel.tp=1", "--set", "launch.nodes=2", "--set", "launch.ranks=2"]
    code, out = run([trainer, "plan", DEMO_RECIPE, "--nodes", "1", "--profile", prof] + sets + elastic)
    m = re.search(r"step time: ([\d.]+) ms, was ([\d.]+) ms", out)
    ratio = float(m.group(1)) / float(m.group(2)) if m else 0
    check(code == 0 and "on 1 of its 2 nodes" in out and "dp 2 -> 1" in out and "4 -> 8 micro-batches" in out
          and "memory per rank" in out and 1.2 < ratio < 2.5,
          f"plan --nodes 1 of 2: dp 2 -> 1, twice the micro-batches, memory and fit, step time {ratio:.2f}x: "
          f"{out.strip().splitlines()[0] if out.strip() else ''} / {m.group(0) if m else 'no step time'}")
    # ... against a node's memory given (the supervisor checks against its own machine's, and refuses
    # a shrink that would not fit with exit 7).
    code, out = run([trainer, "plan", DEMO_RECIPE, "--nodes", "1", "--memory-per-rank-gb", "0.05"] + sets + elastic)
    check(code == 0 and "does NOT fit in --memory-per-rank-gb: needs" in out and "0.05 GB per rank given. Try:" in out,
          f"plan --nodes --memory-per-rank-gb 0.05: does not fit, with what would ({out.strip()[-200:]})")
    code, out = run([trainer, "plan", DEMO_RECIPE, "--nodes", "1"] + sets + elastic + ["--set", "parallel.tp=2"],
                    ok_codes=(2,))
    check("cannot run there" in out and "not a multiple of one replica's pp x cp x tp = 2" in out,
          f"plan --nodes: a node too few for one replica: exit 2 with the reason ({out.strip()[-200:]})")
    bad = os.path.join(tmp, "bad.json")
    open(bad, "w").write("{}")
    code, out = run([trainer, "plan", DEMO_RECIPE, "--ranks", "2", "--search", "--profile", bad] + sets,
                    ok_codes=(2,))
    check("not a machine profile" in out, "plan --search with a file that is no profile: exit 2")
    older = os.path.join(tmp, "older.json")
    json.dump(dict(p, format="trainer-machine-profile/2"), open(older, "w"))
    code, out = run([trainer, "plan", DEMO_RECIPE, "--ranks", "2", "--search", "--profile", older] + sets,
                    ok_codes=(2,))
    check("earlier trainer" in out and "trainer calibrate" in out,
          "plan --search with a profile of an earlier format: exit 2, says to calibrate again")

    # Several calibrations: each layout is priced at the median of their predictions. The profile with its
    # anchor's measured step x2 and x3 makes three whose middle is the x2 one, priced alone as the reference.
    scaled = []
    for f in (3, 2):
        scaled.append(os.path.join(tmp, f"x{f}.json"))
        json.dump(dict(p, anchor_measured_ms=f * p["anchor_measured_ms"]), open(scaled[-1], "w"))
    plan3, plan2 = os.path.join(tmp, "plan3.json"), os.path.join(tmp, "plan2.json")
    _, out = run([trainer, "plan", DEMO_RECIPE, "--ranks", "2", "--search", "--profile", ",".join([scaled[0], prof,
                  scaled[1]]), "--json", plan3] + sets)
    run([trainer, "plan", DEMO_RECIPE, "--ranks", "2", "--search", "--profile", scaled[1], "--json", plan2] + sets)
    three = {x["label"]: x["step_ms"] for x in json.load(open(plan3))["layouts"]}
    alone = {x["label"]: x["step_ms"] for x in json.load(open(plan2))["layouts"]}
    check(three == alone and "3 profiles, each layout at the median of their predictions" in out,
          f"plan --search with 3 profiles: all {len(three)} layouts priced as the median one alone")
    other = os.path.join(tmp, "other.json")
    json.dump(dict(p, ranks=4), open(other, "w"))
    code, out = run([trainer, "plan", DEMO_RECIPE, "--ranks", "2", "--search", "--profile", f"{prof},{other}"] + sets,
                    ok_codes=(2,))
    check("differ in rank count (2, 4)" in out, "plan --search with profiles of 2 and 4 ranks: exit 2, says so")

    sets += ["--set", "parallel.tp=1", "--set", "parallel.pp=2"]  # the demo's layout on 2 ranks
    base = os.path.join(tmp, "base.json")
    smoke = [mpirun, "-np", "2", trainer, "smoke", DEMO_RECIPE, "--steps", "6", "--profile", prof] + sets
    _, out = run(smoke + ["--json", base], env=env)
    b = json.load(open(base))
    mem = b["memory"]["total"]
    check(not os.path.exists(f"{tmp}/never") and not os.path.exists(f"{tmp}/never_ckpt")
          and not [d for d in os.listdir(tmp) if d.startswith("trainer-smoke-")],
          "smoke: nothing written to run.dir or checkpoint.dir; its scratch directory removed")
    check(b["measured"]["tokens_per_s"] > 0 and len(b["measured"]["step_ms_each"]) == 4
          and abs(mem["measured_mb"] / mem["plan_mb"] - 1) < 0.1 and b["predicted"]["step_ms"] > 0
          and "full run" in out,
          f"smoke: {b['measured']['tokens_per_s']:.0f} tokens/s, memory {mem['measured_mb']:.1f} MB vs plan "
          f"{mem['plan_mb']:.1f}, measured/predicted {b['measured']['step_ms'] / b['predicted']['step_ms']:.2f}")

    rerun = os.path.join(tmp, "rerun.json")
    # Tolerance 70%: another test's 8 ranks on the same 2 cores can halve one run's rate and not the
    # other's; the slow fault (3 s a step, against a step of well under 1 s) still falls far below.
    code, out = run(smoke + ["--baseline", base, "--tolerance", "0.7", "--keep", "--json", rerun], env=env)
    check(code == 0, "smoke --baseline: an unchanged rerun passes (tolerance 70% on a shared 2-core machine)")
    check_stages(json.load(open(rerun)), tmp, out)
    slow = dict(env, TRAINER_FAULT="slow rank=0 ms=3000 launch=all")
    code, out = run(smoke + ["--baseline", base, "--tolerance", "0.7"], ok_codes=(9,), env=slow)
    check("below the baseline" in out, "smoke --baseline: a `slow` fault (3 s per step) fails with exit 9: " +
          next((l for l in out.splitlines() if "FAILED" in l), "?"))
    # A peak far above any CPU: a stale cached peak (the run faster than it) would read MFU as 100%.
    code, out = run(smoke + ["--min-mfu", "0.99", "--set", "runtime.peak_gflops=1e6"], ok_codes=(9,), env=env)
    check("below --min-mfu" in out, "smoke --min-mfu 0.99: exit 9 naming the MFU")

    # --check-restart: save, second launch, bit-identical continuation; a NaN
    # skipped in the second launch only is a restart that does not continue.
    rj = os.path.join(tmp, "restart.json")
    code, out = run(smoke + ["--check-restart", "--json", rj], env=env)
    r = json.load(open(rj))["restart"]
    check(r["identical"] and r["steps_compared"] == 4 and r["checkpoint_mb"] > 0 and r["write_mb_per_s"] > 0,
          f"smoke --check-restart (2 ranks, pp 2): saved at step {r['saved_at_step']}, {r['checkpoint_mb']:.1f} MB, "
          f"{r['save_blocking_ms']:.0f} ms blocking, {r['steps_compared']} steps after it identical")
    bad_restart = dict(env, TRAINER_FAULT="nan step=4 launch=1")
    code, out = run(smoke + ["--check-restart", "--set", "training.on_nan=skip"], ok_codes=(9,), env=bad_restart)
    check("does not continue" in out and "step 4: grad_norm" in out,
          "smoke --check-restart with a NaN in the resumed launch only: exit 9 naming step 4")

    # --check-restart on 1 process and on dp 2 x pp 2 x tp 2 (8 ranks).
    for np_, layout in ((1, ["--set", "parallel.pp=1"]), (8, ["--set", "parallel.tp=2", "--set", "parallel.pp=2"])):
        code, out = run([mpirun, "-np", str(np_), trainer, "smoke", DEMO_RECIPE, "--steps", "5", "--check-restart",
                         "--json", rj] + sets + layout, env=env)
        r = json.load(open(rj))["restart"]
        check(r["identical"] and r["steps_compared"] == 3,
              f"smoke --check-restart on {np_} rank(s): {r['steps_compared']} steps after the save identical")

    # checkpoint.every = "auto": each save re-estimates the interval as Daly's
    # sqrt(2 d M) (refined) over the median step time, and the next save
    # follows it.
    auto_run = os.path.join(tmp, "auto")
    _, out = run([mpirun, "-np", "2", trainer, "train", DEMO_RECIPE] + sets[:-4] +
                 ["--set", "training.steps=40", "--set", f'run.dir="{auto_run}"',
                  "--set", f'checkpoint.dir="{auto_run}/ckpt"', "--set", 'checkpoint.every="auto"',
                  "--set", "checkpoint.mtbf_hours=0.005", "--set", "parallel.pp=1"], env=env)
    saves = [int(l.split()[2]) for l in out.splitlines() if l.startswith("checkpoint: step ")]
    notes = [l for l in out.splitlines() if l.startswith("checkpoint: automatic interval now")]
    steps_ms = [json.loads(l)["step_ms"] for l in open(os.path.join(auto_run, "metrics.jsonl"))]
    ok = len(saves) >= 3 and len(notes) == len(saves)
    for i, note in enumerate(notes[:-1]):
        interval, save_s = int(note.split()[4]), float(note.split("save ")[1].split()[0])
        recent = sorted(steps_ms[max(0, saves[i] - 21):saves[i]])
        med = recent[len(recent) // 2] if len(recent) % 2 else 0.5 * sum(recent[len(recent) // 2 - 1:][:2])
        m = 0.005 * 3600
        r_ = save_s / (2 * m)
        daly = (2 * save_s * m) ** 0.5 * (1 + r_ ** 0.5 / 3 + r_ / 9) - save_s
        ok = ok and abs(interval - daly / (med / 1e3)) <= 1.5  # (the printed save time is rounded)
        if i + 2 < len(saves):  # the last save is the run's end, not the interval's
            ok = ok and abs((saves[i + 1] - saves[i]) - interval) <= 1
    check(ok, f"checkpoint.every = \"auto\" (MTBF 18 s): saves at steps {saves}, each interval as Daly's formula "
              f"gives from the measured save time and step time ({notes[0].split('(')[1][:40] if notes else '?'}...)")
    _, out = run([trainer, "train", DEMO_RECIPE, "--print-config", "--set", 'checkpoint.every="auto"'])
    check('every = "auto"' in out, "checkpoint.every = \"auto\" round-trips through the resolved recipe")
    _, out = run([trainer, "train", DEMO_RECIPE, "--print-config", "--set", "checkpoint.every=aut"], ok_codes=(2,))
    check('expected an integer or "auto"' in out, "checkpoint.every = \"aut\": exit 2, says what is allowed")

    missing = [s.replace(f"{data}/train_", f"{tmp}/nothing/train_") for s in sets]
    out_json = os.path.join(tmp, "synthetic.json")
    _, out = run([mpirun, "-np", "2", trainer, "smoke", DEMO_RECIPE, "--steps", "4", "--json", out_json] + missing,
                 env=env)
    check(json.load(open(out_json))["data"] == "synthetic" and "random tokens instead" in out,
          "smoke with the recipe's data missing: random tokens, said so")

    # trainer bench against a peak far below the model's rate: MFU is against the rate itself (100%, said
    # so), never above; at a peak far above it, the figure is the plain ratio.
    for peak, want in ((0.001, 1.0), (1e6, None)):
        _, out = run([trainer, "bench", DEMO_RECIPE, "--steps", "2", "--set", f"runtime.peak_gflops={peak}"] + sets)
        rec = json.loads(out.strip().splitlines()[-1])
        ratio = rec["model_gflops"] / peak
        ok = (rec["mfu"] == want and "that peak is low" in out) if want else abs(rec["mfu"] - ratio) < 1e-9 * ratio
        check(ok and rec["mfu"] <= 1.0, f"bench at runtime.peak_gflops = {peak}: MFU {100 * rec['mfu']:.4g}% "
                                        f"({rec['model_gflops']:.1f} GFLOP/s model FLOPs)")
    finish("smoke")


if __name__ == "__main__":
    main()
