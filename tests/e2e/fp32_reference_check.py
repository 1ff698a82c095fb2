"""fp32 results stay put: the first 20 steps of the demo recipe and of a
llama variant, in one process, against losses recorded before the attention
contract changed (tests/reference/fp32_losses.json, made by this script with
--record on the code of that time). Summation order may move the last bits;
anything beyond RTOL is a change of results. The tolerance survives another
CPU's BLAS kernels (those differ from ours in the order of their sums only).

usage: fp32_reference_check.py TRAINER [--record]
"""
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

REFERENCE = os.path.join(harness.REFERENCE, "fp32_losses.json")
RTOL = 1e-5
STEPS = 20
RECIPES = {
    "demo_gpt2": [],
    "demo_llama": ["--set", "model.arch=llama", "--set", "model.n_kv_heads=2", "--set", "model.tie_embeddings=false"],
}


def losses(trainer, tmp, data, extra):
    run = os.path.join(tmp, "run_" + str(abs(hash(tuple(extra)))))
    subprocess.run([trainer, "train", harness.DEMO_RECIPE, "--set", f'data.train=["{data}/train_*.bin"]',
                    "--set", "data.val=[]", "--set", "training.eval_every=0", "--set", f"run.dir={run}",
                    "--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set", "parallel.sequence_parallel=false",
                    "--set", f"training.steps={STEPS}", "--set", "training.log_every=1", "--set", "checkpoint.every=0",
                    "--set", "runtime.peak_gflops=1", *extra], check=True, stdout=subprocess.DEVNULL)
    return [json.loads(l)["loss"] for l in open(os.path.join(run, "metrics.jsonl"))]


def main():
    trainer, record = sys.argv[1], "--record" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses", "--output", data],
                       check=True, stdout=subprocess.DEVNULL)
        got = {name: losses(trainer, tmp, data, extra) for name, extra in RECIPES.items()}
    if record:
        os.makedirs(os.path.dirname(REFERENCE), exist_ok=True)
        json.dump(got, open(REFERENCE, "w"), indent=1)
        print(f"recorded {REFERENCE}")
        return
    ref = json.load(open(REFERENCE))
    bad = 0
    for name, ls in got.items():
        worst = max(abs(a - b) / abs(b) for a, b in zip(ls, ref[name]))
        ok = len(ls) == len(ref[name]) == STEPS and worst <= RTOL
        bad += not ok
        print(("ok   " if ok else "FAIL ") + f"{name}: {STEPS} steps, worst relative difference {worst:.2e} (bound {RTOL})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
