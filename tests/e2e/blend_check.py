"""Weighted blends through the real binary: two sources (an llm.c one and
a Megatron one) at weights 0.3/0.7; the per-source sample counts in
metrics.jsonl equal Megatron's blending rule computed here (and so stay
within 1% of the weights past a few hundred samples); the small source
runs out and starts its next epoch; validation loss per named source;
a run stopped mid-way and resumed ends bit-identical to a straight run.

usage: blend_check.py TRAINER MPIEXEC
"""
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, failures, tensors, same_tensors, tiny_recipe  # noqa: E402


def megatron_counts(weights, n):
    """Megatron's build_blending_indices: counts of each source in positions [0, n)."""
    counts = [0] * len(weights)
    for i in range(n):
        at = max(i, 1.0)
        errs = [w * at - c for w, c in zip(weights, counts)]
        counts[errs.index(max(errs))] += 1
    return counts


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def records(run_dir):
    out = {}
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        r = json.loads(line)
        out.setdefault(r["step"], {}).update(r)
    return out


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="blend_")
    a, b = os.path.join(tmp, "web"), os.path.join(tmp, "code")
    src = os.path.join(tmp, "code_src")
    os.makedirs(src)
    for i in range(4):
        open(os.path.join(src, f"f{i}.py"), "w").write(
            "".join(f"def f{i}_{k}(x):\n    return x * {k} + {i}\n\n" for k in range(300)))
    run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses/BSD",
         "--output", a])
    run([trainer, "data", "prepare", "--input", src, "--output", b, "--output-format", "megatron"])
    recipe = os.path.join(tmp, "blend.toml")

    def train(run_dir, *extra, np_=2):
        tiny_recipe(recipe, {"run.name": "blend", "run.dir": run_dir, "model.seq_len": 32,
                             "data.train": [{"path": f"{a}/train_*.bin", "weight": 0.3, "name": "web"},
                                            {"path": f"{b}/train_*.idx", "weight": 0.7, "name": "code"}],
                             "data.val": [{"path": f"{a}/val_*.bin", "name": "web"},
                                          {"path": f"{b}/val_*.idx", "name": "code"}],
                             "training.steps": 60, "training.global_batch": 8, "training.log_every": 1,
                             "training.eval_every": 20, "training.eval_batches": 2, "checkpoint.every": 20})
        return run([mpiexec, "-np", str(np_), trainer, "train", recipe, *extra])

    straight = os.path.join(tmp, "straight")
    rc, out = train(straight)
    check(rc == 0 and "blend: web 30.0%" in out, "a 0.3/0.7 blend trains; the header states the blend")
    web_samples = int(out.split("blend: web 30.0% of samples (")[1].split()[0]) if "blend: web" in out else 0
    recs = records(straight)
    steps = sorted(s for s in recs if "samples/web" in recs[s])
    exact = all([recs[s]["samples/web"], recs[s]["samples/code"]] == megatron_counts([0.3, 0.7], 8 * s) for s in steps)
    check(len(steps) == 60 and exact, f"per-source sample counts at all {len(steps)} steps equal Megatron's rule")
    worst = max(abs(recs[s]["samples/web"] / (8 * s) - 0.3) for s in steps if 8 * s >= 200)
    check(worst <= 0.01, f"past 200 samples the web share is within 1% of 0.3 at every step (worst {worst:.4f})")
    final_web = recs[60]["samples/web"]
    check(final_web > web_samples > 0,
          f"the web source ({web_samples} samples) ran out and started a new epoch ({final_web} drawn)")
    val_steps = [s for s in recs if "val_loss" in recs[s]]
    per_source = all("val_loss/web" in recs[s] and "val_loss/code" in recs[s] for s in val_steps)
    check(val_steps == [20, 40, 60] and per_source, f"val_loss/web and val_loss/code at steps {val_steps}")
    check("val loss" in out and "(web " in out and "code " in out, "the console shows the per-source val losses")

    resumed = os.path.join(tmp, "resumed")
    train(resumed, "--set", "training.exit_after=30", "--set", "checkpoint.every=10")
    rc, out = train(resumed, "--set", "checkpoint.every=10")
    ra = records(resumed)
    same = all(ra[s]["loss"] == recs[s]["loss"] for s in range(31, 61))
    check(rc == 0 and "at step 30" in out and same, "stopped at step 30 and resumed: losses 31..60 equal the straight run")
    check(all(ra[s]["samples/web"] == recs[s]["samples/web"] for s in range(31, 61)), "resumed: the same blend counts")
    ta = tensors(os.path.join(straight, "checkpoints", "step_00000060"))
    tb = tensors(os.path.join(resumed, "checkpoints", "step_00000060"))
    check(same_tensors(ta, tb), f"resumed: final weights and optimizer state bit-identical ({len(ta)} tensors)")
    if failures:
        sys.exit(1)


main()
