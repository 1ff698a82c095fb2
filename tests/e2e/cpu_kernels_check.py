#!/usr/bin/python3
"""The CPU kernel sets (runtime.cpu_kernels) through the real binary.

1. `trainer --version` and the run's first line say which set runs;
   TRAINER_CPU_KERNELS caps the sets (as on a CPU without the wider ones);
   a set out of reach, or a name that is no set, is refused with exit 2
   naming why and what may run.
2. The demo model (configs/demo.toml, one process) trained 50 steps with every
   set this process may run writes the same losses (9 digits in
   metrics.jsonl), validation loss and checkpoint tensors (h5diff: exact) as
   with the generic set.
3. The loss is right, not only repeatable: a GPT-2-vocabulary model (50304
   ids, the licence texts through the GPT-2 tokenizer) trained 300 steps
   reports a validation loss within 1e-6 (absolute) of
   tests/reference/torch_model.py in float64 on the same windows, with the
   weights of its checkpoint. (Before the sums were double, a row's tens of
   thousands of terms below 1e-8 rounded away: 1.2e-5 low, measured.)

usage: cpu_kernels_check.py TRAINER MPIEXEC
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DEMO_RECIPE, check, finish, run, torch_val_loss  # noqa: E402

SETS = ["generic", "avx2", "avx512"]
DEMO_STEPS = 50
# The GPT-2-vocabulary model: small, so that 300 steps take a minute or two.
GPT2_CFG = dict(arch="gpt2", vocab_size=50304, d_model=64, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=256,
                seq_len=64, tie_embeddings=True, norm_eps=1e-5, rope_theta=10000.0)
GPT2_STEPS, GPT2_EVAL_BATCHES, GPT2_MICRO = 300, 4, 8
VAL_ATOL = 1e-6


def version_sets(trainer, env):
    """(the set that runs, the sets the CPU runs, the cap) from `trainer --version`."""
    _, out = run([trainer, "--version"], env=env)
    line = [l for l in out.splitlines() if l.startswith("cpu kernels: ")]
    check(len(line) == 1, f"trainer --version has a cpu kernels line ({line})")
    cpu = line[0].split("this CPU runs ")[1].split(";")[0].split(", TRAINER_CPU_KERNELS caps it at ")
    return line[0].split()[2], cpu[0].split(", "), cpu[1] if len(cpu) > 1 else None


def allowed_sets(trainer):
    """The sets this process may run (the CPU's, capped by TRAINER_CPU_KERNELS when the suite sets it)."""
    bare = {k: v for k, v in os.environ.items() if k != "TRAINER_CPU_KERNELS"}
    runs, cpu, cap = version_sets(trainer, bare)
    check(runs == cpu[-1] and cap is None, f"--version: the widest set the CPU runs runs ({runs} of {cpu})")
    for s in cpu:
        got = version_sets(trainer, dict(bare, TRAINER_CPU_KERNELS=s))
        check(got[0] == s and (got[2] == s) == (s != cpu[-1]),
              f"TRAINER_CPU_KERNELS={s}: --version says {s} runs and names the cap ({got})")
    cap = os.environ.get("TRAINER_CPU_KERNELS")
    return cpu[:cpu.index(cap) + 1] if cap in cpu else cpu


def refusals(trainer, allowed, base):
    rc, out = run([trainer, "train", *base, "--set", "runtime.cpu_kernels=sse"], ok_codes=(2,))
    check(rc == 2 and "runtime.cpu_kernels" in out, "runtime.cpu_kernels = \"sse\": exit 2 naming the key")
    rc, out = run([trainer, "--version"], ok_codes=(2,), env=dict(os.environ, TRAINER_CPU_KERNELS="sse"))
    check(rc == 2 and "TRAINER_CPU_KERNELS = \"sse\" is not a kernel set" in out,
          "TRAINER_CPU_KERNELS=sse: exit 2 naming the variable")
    for s in SETS[len(allowed):]:  # out of reach here: the CPU lacks it, or the suite's cap
        rc, out = run([trainer, "train", *base, "--set", f"runtime.cpu_kernels={s}"], ok_codes=(2,))
        check(rc == 2 and ("this CPU lacks" in out or "caps this process" in out)
              and "the sets allowed are " + ", ".join(allowed) in out,
              f"runtime.cpu_kernels = \"{s}\" out of reach: exit 2 naming why and what may run")
    if len(allowed) > 1:  # the cap, as an AVX2 or generic machine sees a wider set
        rc, out = run([trainer, "train", *base, "--set", f"runtime.cpu_kernels={allowed[-1]}"], ok_codes=(2,),
                      env=dict(os.environ, TRAINER_CPU_KERNELS=allowed[-2]))
        check(rc == 2 and f'TRAINER_CPU_KERNELS = "{allowed[-2]}" caps this process' in out,
              f"TRAINER_CPU_KERNELS={allowed[-2]} and runtime.cpu_kernels = \"{allowed[-1]}\": exit 2 naming the cap")


def demo_runs(trainer, tmp, runs):
    data = os.path.join(tmp, "demo_data")
    run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses", "--output", data])
    base = [DEMO_RECIPE, "--set", f'data.train=["{data}/train_*.bin"]', "--set", f'data.val=["{data}/val_*.bin"]',
            "--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set", "parallel.sequence_parallel=false",
            "--set", f"training.steps={DEMO_STEPS}", "--set", "training.log_every=1",
            "--set", f"training.eval_every={DEMO_STEPS}", "--set", f"checkpoint.every={DEMO_STEPS}",
            "--set", "runtime.peak_gflops=1"]
    refusals(trainer, runs, base + ["--set", f"run.dir={tmp}/refused"])
    got = {}
    for s in runs:
        d = os.path.join(tmp, "demo_" + s)
        _, out = run([trainer, "train", *base, "--set", f"run.dir={d}", "--set", f"runtime.cpu_kernels={s}"])
        first = next((l for l in out.splitlines() if l.startswith("trainer: ")), "")
        check(f"on CPU, {s} kernels" in first, f"{s}: the run's first line says \"on CPU, {s} kernels\" ({first[:90]}...)")
        recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        got[s] = ([r["loss"] for r in recs if "loss" in r], [r["val_loss"] for r in recs if "val_loss" in r],
                  os.path.join(d, "checkpoints", f"step_{DEMO_STEPS:08d}"))
    ref_losses, ref_val, ref_step = got["generic"]
    files = sorted(os.path.basename(f) for f in glob.glob(ref_step + "/*.h5"))
    check(len(ref_losses) == DEMO_STEPS and len(ref_val) == 1 and files,
          f"generic: {len(ref_losses)} losses, validation loss {ref_val}, checkpoint files {files}")
    for s in runs[1:]:
        losses, val, step = got[s]
        check(losses == ref_losses and val == ref_val,
              f"{s}: the {DEMO_STEPS} losses and the validation loss equal generic's ({losses[-1]} / {val})")
        diffs = [subprocess.run(["h5diff", os.path.join(ref_step, f), os.path.join(step, f)],
                                capture_output=True, text=True) for f in files]
        check(all(p.returncode == 0 for p in diffs),
              f"{s}: h5diff finds every checkpoint tensor equal to generic's ({len(files)} files)"
              + "".join(p.stdout[:300] for p in diffs if p.returncode))


def val_loss_against_float64(trainer, tmp):
    data = os.path.join(tmp, "gpt2_data")
    run([trainer, "data", "prepare", "--tokenizer", "gpt2", "--input", "/usr/share/common-licenses", "--output", data])
    d = os.path.join(tmp, "gpt2_run")
    c = GPT2_CFG
    sets = ["--set", f'data.train=["{data}/train_*.bin"]', "--set", f'data.val=["{data}/val_*.bin"]',
            "--set", f"run.dir={d}", "--set", "parallel.tp=1", "--set", "parallel.pp=1",
            "--set", "parallel.sequence_parallel=false", "--set", f"model.vocab_size={c['vocab_size']}",
            "--set", f"model.d_model={c['d_model']}", "--set", f"model.n_layers={c['n_layers']}",
            "--set", f"model.n_heads={c['n_heads']}", "--set", f"model.d_ff={c['d_ff']}",
            "--set", f"model.seq_len={c['seq_len']}", "--set", f"training.steps={GPT2_STEPS}",
            "--set", f"training.global_batch={GPT2_MICRO}", "--set", f"training.micro_batch={GPT2_MICRO}",
            "--set", f"training.eval_every={GPT2_STEPS}", "--set", f"training.eval_batches={GPT2_EVAL_BATCHES}",
            "--set", f"training.log_every={GPT2_STEPS}", "--set", f"checkpoint.every={GPT2_STEPS}",
            "--set", "optimizer.lr=3e-3", "--set", "optimizer.min_lr=3e-3", "--set", "optimizer.warmup_steps=10",
            "--set", "runtime.threads=2", "--set", "runtime.peak_gflops=1"]
    run([trainer, "train", DEMO_RECIPE, *sets])
    val = [r["val_loss"] for r in map(json.loads, open(os.path.join(d, "metrics.jsonl"))) if "val_loss" in r][-1]
    export = os.path.join(tmp, "gpt2_export.h5")
    run([trainer, "ckpt", "export", os.path.join(d, "checkpoints", f"step_{GPT2_STEPS:08d}"), "--output", export])
    want = torch_val_loss(export, c, sorted(glob.glob(data + "/val_*.bin"))[0], GPT2_EVAL_BATCHES * GPT2_MICRO)
    check(abs(val - want) <= VAL_ATOL, f"GPT-2 vocabulary, {GPT2_STEPS} steps: validation loss {val:.9f} against "
                                       f"float64 PyTorch {want:.9f} (difference {abs(val - want):.1e}, bound {VAL_ATOL:.0e})")


def main():
    trainer = sys.argv[1]
    runs = allowed_sets(trainer)
    with tempfile.TemporaryDirectory() as tmp:
        demo_runs(trainer, tmp, runs)
        val_loss_against_float64(trainer, tmp)
    finish("cpu kernel set")


if __name__ == "__main__":
    main()
