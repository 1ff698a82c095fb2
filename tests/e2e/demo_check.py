#!/usr/bin/python3
"""The README demo as a test: prepares the licence texts with `trainer data
prepare`, trains configs/demo.toml on 8 MPI ranks (dp 2 x pp 2 x tp 2), and
checks from metrics.jsonl that the loss fell well below ln(256) = 5.55 and
that its first steps match one process training the same recipe.

usage: demo_check.py TRAINER_BINARY MPIEXEC
"""
import json
import math
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DEMO_RECIPE  # noqa: E402

FINAL_LOSS_MAX, FINAL_VAL_MAX = 2.0, 2.5
COMPARE_STEPS, COMPARE_RTOL = 20, 1e-4  # 3D vs 1 process: reduction-order rounding only


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses",
                        "--output", data], check=True)
        recipe = DEMO_RECIPE
        data_sets = ["--set", f'data.train=["{data}/train_*.bin"]', "--set", f'data.val=["{data}/val_*.bin"]']
        run = os.path.join(tmp, "run")
        subprocess.run([mpiexec, "-np", "8", trainer, "train", recipe, *data_sets, "--set", f"run.dir={run}",
                        "--set", "training.log_every=1"], check=True)
        recs = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
        one = os.path.join(tmp, "one")
        subprocess.run([trainer, "train", recipe, *data_sets, "--set", f"run.dir={one}",
                        "--set", "parallel.tp=1", "--set", "parallel.pp=1",
                        "--set", "parallel.sequence_parallel=false", "--set", "training.log_every=1",
                        "--set", f"training.steps={COMPARE_STEPS}", "--set", "training.eval_every=0",
                        "--set", "optimizer.warmup_steps=20"], check=True)
        ref = [json.loads(line) for line in open(os.path.join(one, "metrics.jsonl"))]
        resolved = open(os.path.join(run, "recipe.resolved.toml")).read()
    assert "[training]" in resolved and "global_batch = 16" in resolved, "recipe.resolved.toml"
    need = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_ms", "data_wait_ms"}
    for r in recs:
        missing = need - set(r)
        assert not missing, f"metrics record {r} lacks {missing}"
    # The 1-process run is shorter, so its schedule differs after warm-up; the
    # first 20 steps are all warm-up in both (warmup_steps = 20).
    worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(recs[:COMPARE_STEPS], ref))
    print(f"demo: 8 ranks (2x2x2) vs 1 process, first {COMPARE_STEPS} steps: worst loss rel diff {worst:.2e}")
    first, last = recs[0], recs[-1]
    vals = [r["val_loss"] for r in recs if "val_loss" in r]
    print(f"demo: loss {first['loss']:.3f} -> {last['loss']:.3f} (ln 256 = {math.log(256):.3f}); "
          f"val loss {vals[0]:.3f} -> {vals[-1]:.3f}; {last['step']} steps")
    ok = (first["loss"] > 5.0 and last["loss"] < FINAL_LOSS_MAX and vals[-1] < FINAL_VAL_MAX
          and vals[-1] < vals[0] and worst < COMPARE_RTOL and len(ref) == COMPARE_STEPS)
    if not ok:
        print(f"FAIL: want final loss < {FINAL_LOSS_MAX}, final val loss < {FINAL_VAL_MAX} and falling, "
              f"and the first {COMPARE_STEPS} steps within {COMPARE_RTOL} of one process")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
