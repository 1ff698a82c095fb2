#!/usr/bin/python3
"""Checkpoints through the real binary:
- bit-identical resume: 20 steps straight vs 10 steps, exit, resume, 10 more,
  for 1 process and for 8 ranks as 2x2x2: the same logged losses and
  bit-identical final weights and AdamW state (compared with h5py);
- resharded resume: a 2x2x2 checkpoint resumed as 1 process and as
  (dp 4, pp 1, tp 2): losses within 1e-5 of the 2x2x2 continuation;
- retention: keep=2 leaves exactly the two newest committed checkpoints;
- a corrupted byte in the newest checkpoint is detected on resume, reported,
  and the previous checkpoint is used.

usage: checkpoint_check.py TRAINER_BINARY MPIEXEC
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

failures = []


def check(ok, msg):
    print(("ok   " if ok else "FAIL ") + msg)
    if not ok:
        failures.append(msg)


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    recipe = os.path.join(root, "configs/demo.toml")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses",
                        "--output", data], check=True, stdout=subprocess.DEVNULL)
        base = ["--set", f'data.train=["{data}/train_*.bin"]', "--set", "data.val=[]",
                "--set", "training.steps=20", "--set", "training.log_every=1",
                "--set", "optimizer.warmup_steps=2", "--set", "training.eval_every=0",
                "--set", "model.n_layers=4"]
        single = ["--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set", "parallel.sequence_parallel=false"]

        def train(run, np_, extra, ok_codes=(0,)):
            cmd = ([mpiexec, "-np", str(np_)] if np_ > 1 else []) + [trainer, "train", recipe, *base,
                                                                  "--set", f"run.dir={run}", *extra]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode not in ok_codes:
                print(p.stdout, p.stderr)
                raise SystemExit(f"trainer failed ({p.returncode}): {' '.join(cmd)}")
            return p.stdout + p.stderr

        def losses(run):
            return {r["step"]: r["loss"] for r in map(json.loads, open(os.path.join(run, "metrics.jsonl")))}

        def tensors(step_dir):
            out = {}
            for f in sorted(glob.glob(os.path.join(step_dir, "*.h5"))):
                with h5py.File(f, "r") as h:
                    h.visititems(lambda n, d: out.__setitem__((os.path.basename(f), n), d[()])
                                 if isinstance(d, h5py.Dataset) else None)
            return out

        for name, np_, layout in [("1 process", 1, single), ("2x2x2", 8, [])]:
            a, b = os.path.join(tmp, f"straight_{np_}"), os.path.join(tmp, f"resumed_{np_}")
            train(a, np_, layout + ["--set", "checkpoint.every=20"])
            train(b, np_, layout + ["--set", "checkpoint.every=10", "--set", "training.exit_after=10"])
            out = train(b, np_, layout + ["--set", "checkpoint.every=10"])
            check("resumed from" in out and "at step 10" in out, f"{name}: resumed at step 10")
            la, lb = losses(a), losses(b)
            check(all(la[s] == lb[s] for s in range(11, 21)), f"{name}: losses after the resume equal the straight run")
            ta, tb = tensors(a + "/checkpoints/step_00000020"), tensors(b + "/checkpoints/step_00000020")
            same = ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta)
            check(same and len(ta) > 0, f"{name}: final weights and AdamW state bit-identical ({len(ta)} tensors)")

        # Resharding: the 2x2x2 checkpoint at step 10, resumed under other layouts.
        ref = losses(os.path.join(tmp, "resumed_8"))
        src = os.path.join(tmp, "resumed_8", "checkpoints", "step_00000010")
        for name, np_, layout in [("(1,1,1)", 1, single),
                                  ("(4,1,2)", 8, ["--set", "parallel.pp=1", "--set", "parallel.tp=2"])]:
            run = os.path.join(tmp, "reshard_" + str(np_))
            train(run, np_, layout + ["--resume", src])
            got = losses(run)
            worst = max(abs(got[s] - ref[s]) / ref[s] for s in range(11, 21))
            check(worst < 1e-5, f"2x2x2 -> {name}: losses after resume within 1e-5 (worst {worst:.1e})")

        # Retention and corruption.
        run = os.path.join(tmp, "retain")
        train(run, 1, single + ["--set", "checkpoint.every=5", "--set", "checkpoint.keep=2"])
        kept = sorted(os.path.basename(d) for d in glob.glob(run + "/checkpoints/step_*"))
        check(kept == ["step_00000015", "step_00000020"], f"keep=2 leaves the two newest: {kept}")
        shard = glob.glob(run + "/checkpoints/step_00000020/*.h5")[0]
        with open(shard, "r+b") as f:
            f.seek(os.path.getsize(shard) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        out = train(run, 1, single + ["--set", "training.steps=25"])
        check("checksum mismatch" in out and "resumed from" in out and "step_00000015 at step 15" in out,
              "a corrupted shard is reported and the previous checkpoint is used")
        out = train(run, 1, single + ["--resume", run + "/checkpoints/step_00000020"], ok_codes=(4,))
        check("checksum mismatch" in out, "resuming the corrupted checkpoint by path fails with exit code 4")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
