"""bf16 mixed precision through the real binary (training.precision = "bf16"):

- the loss curve of the demo recipe and of a llama variant (one process, the
  first STEPS steps) stays within rtol 0.05 of the fp32 run at every logged
  step, and the final validation loss within 3% (Megatron's bound for loss
  curves);
- a bf16 run stopped and resumed from its checkpoint continues bit-identical
  to one that never stopped (the bf16 weights are derived from the fp32
  master weights the checkpoint keeps);
- an fp32 checkpoint resumes into a bf16 run and a bf16 one into an fp32
  run: the recipe note names the change, the step count continues, and the
  losses after the switch stay within rtol 0.05 of the run that did not switch.

Layouts in bf16 (every one of test_parallel against one process), recompute
in bf16 and the traffic halving are in tests/multirank/test_parallel.cpp.

usage: bf16_check.py TRAINER [STEPS]
"""
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
from harness import DEMO_RECIPE, check, failures, losses, run

STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 100
ONE_PROCESS = ["--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set", "parallel.sequence_parallel=false",
               "--set", "runtime.peak_gflops=1"]
LLAMA = ["--set", "model.arch=llama", "--set", "model.n_kv_heads=2", "--set", "model.tie_embeddings=false"]


def val_losses(run_dir):
    import json
    return [r["val_loss"] for r in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl"))) if "val_loss" in r]


def curves(trainer, tmp, data):
    for name, extra in (("demo", []), ("llama", LLAMA)):
        runs = {}
        for precision in ("fp32", "bf16"):
            d = os.path.join(tmp, f"{name}_{precision}")
            run([trainer, "train", DEMO_RECIPE, *ONE_PROCESS, *extra, "--set", f'data.train=["{data}/train_*.bin"]',
                 "--set", f'data.val=["{data}/val_*.bin"]', "--set", f"training.steps={STEPS}",
                 "--set", "training.log_every=10", "--set", "training.eval_every=0", "--set", "checkpoint.every=0",
                 "--set", f"run.dir={d}", "--set", f"training.precision={precision}"])
            runs[precision] = d
        a, b = losses(runs["fp32"]), losses(runs["bf16"])
        worst = max(abs(b[s] - a[s]) / a[s] for s in a)
        check(a.keys() == b.keys() and worst <= 0.05,
              f"{name}: bf16 loss curve within rtol 0.05 of fp32 at all {len(a)} logged steps (worst {worst:.4f}; "
              f"step {STEPS}: fp32 {a[STEPS]:.4f}, bf16 {b[STEPS]:.4f})")
        va, vb = val_losses(runs["fp32"])[-1], val_losses(runs["bf16"])[-1]
        check(abs(vb - va) / va <= 0.03, f"{name}: final validation loss bf16 {vb:.4f} vs fp32 {va:.4f} "
                                         f"({100 * (vb - va) / va:+.2f}%, bound 3%)")


def resumes(trainer, tmp, data):
    base = [trainer, "train", DEMO_RECIPE, *ONE_PROCESS, "--set", f'data.train=["{data}/train_*.bin"]',
            "--set", "data.val=[]", "--set", "training.eval_every=0", "--set", "training.steps=12",
            "--set", "training.log_every=1", "--set", "checkpoint.every=6"]
    dirs = {}
    for precision in ("fp32", "bf16"):
        d = os.path.join(tmp, f"straight_{precision}")
        run(base + ["--set", f"run.dir={d}", "--set", f"training.precision={precision}"])
        dirs[precision] = d
    # bf16 -> bf16: stop at step 6, resume, compare with the straight run.
    d = os.path.join(tmp, "resumed_bf16")
    run(base + ["--set", f"run.dir={d}", "--set", "training.precision=bf16", "--set", "training.exit_after=6"])
    _, out = run(base + ["--set", f"run.dir={d}", "--set", "training.precision=bf16"])
    a, b = losses(dirs["bf16"]), losses(d)
    check("at step 6" in out and all(a[s] == b[s] for s in range(7, 13)),
          "bf16: stopped at step 6 and resumed, steps 7-12 bit-identical to the straight bf16 run")
    # Switching precision at a resume: the checkpoint is fp32 either way.
    for src, dst in (("fp32", "bf16"), ("bf16", "fp32")):
        step6 = os.path.join(dirs[src], "checkpoints", "step_00000006")
        d = os.path.join(tmp, f"{src}_to_{dst}")
        _, out = run(base + ["--set", f"run.dir={d}", "--set", f"training.precision={dst}", "--resume", step6])
        got, same = losses(d), losses(dirs[dst])
        worst = max(abs(got[s] - same[s]) / same[s] for s in range(7, 13))
        check("at step 6" in out and "training.precision" in out and sorted(got) == list(range(7, 13)) and worst <= 0.05,
              f"{src} checkpoint -> {dst} run: resumed at step 6, the change noted, steps 7-12 within rtol 0.05 "
              f"of the straight {dst} run (worst {worst:.4f})")


def main():
    trainer = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses", "--output", data])
        resumes(trainer, tmp, data)
        curves(trainer, tmp, data)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
