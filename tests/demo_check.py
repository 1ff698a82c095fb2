#!/usr/bin/python3
"""The README demo as a test: prepares the licence texts with `trainer data
prepare`, trains configs/demo.toml on 2 MPI ranks, and checks from
metrics.jsonl that the loss fell well below ln(256) = 5.55.

usage: demo_check.py TRAINER_BINARY MPIEXEC
"""
import json
import math
import os
import subprocess
import sys
import tempfile

FINAL_LOSS_MAX, FINAL_VAL_MAX = 2.0, 2.5


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses",
                        "--output", data], check=True)
        run = os.path.join(tmp, "run")
        subprocess.run([mpiexec, "-np", "2", trainer, "train", os.path.join(root, "configs/demo.toml"),
                        "--set", f'data.train=["{data}/train_*.bin"]',
                        "--set", f'data.val=["{data}/val_*.bin"]',
                        "--set", f"run.dir={run}"], check=True)
        recs = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
        resolved = open(os.path.join(run, "recipe.resolved.toml")).read()
    assert "[training]" in resolved and "global_batch = 16" in resolved, "recipe.resolved.toml"
    need = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_ms", "data_wait_ms"}
    for r in recs:
        missing = need - set(r)
        assert not missing, f"metrics record {r} lacks {missing}"
    first, last = recs[0], recs[-1]
    vals = [r["val_loss"] for r in recs if "val_loss" in r]
    print(f"demo: loss {first['loss']:.3f} -> {last['loss']:.3f} (ln 256 = {math.log(256):.3f}); "
          f"val loss {vals[0]:.3f} -> {vals[-1]:.3f}; {last['step']} steps")
    ok = (first["loss"] > 5.0 and last["loss"] < FINAL_LOSS_MAX and vals[-1] < FINAL_VAL_MAX
          and vals[-1] < vals[0])
    if not ok:
        print(f"FAIL: want final loss < {FINAL_LOSS_MAX}, final val loss < {FINAL_VAL_MAX} and falling")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
