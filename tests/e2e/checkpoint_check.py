#!/usr/bin/python3
"""Checkpoints through the real binary:
- bit-identical resume: 20 steps straight vs 10 steps, exit, resume, 10 more,
  for 1 process and for 8 ranks as 2x2x2: the same logged losses and
  bit-identical final weights and AdamW state (compared with h5py);
- resharded resume: a 2x2x2 checkpoint resumed as 1 process and as
  (dp 4, pp 1, tp 2): losses within 1e-5 of the 2x2x2 continuation;
- async saves (background writer from a host snapshot) commit the same bytes
  of weights and optimizer state as blocking ones, and a run resumed from
  one ends bit-identical to the straight run;
- crash safety: a rank SIGKILLed at each stage of a save (shards written,
  manifest written, directory renamed, `latest` written) always leaves a
  `latest` that verifies, and the resumed run ends bit-identical to an
  uninterrupted one;
- a save that cannot be written is reported and training finishes; with
  checkpoint.required = true the run stops with exit code 4;
- retention: keep=2 leaves exactly the two newest committed checkpoints;
- a corrupted byte in the newest checkpoint is detected on resume, reported,
  and the previous checkpoint is used;
- `trainer ckpt verify` passes and `trainer ckpt export` writes Hugging Face
  names that plain h5py reads; the PyTorch reference model
  (tests/reference/torch_model.py) loaded from the export reproduces the
  trainer's validation loss at that checkpoint.

usage: checkpoint_check.py TRAINER_BINARY MPIEXEC
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import h5py
import torch


sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (DEMO_RECIPE, check, failures, losses, run as run_cmd, same_tensors, small_demo, tensors,  # noqa: E402
                     torch_val_loss)


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    recipe = DEMO_RECIPE
    with tempfile.TemporaryDirectory() as tmp:
        data, base = small_demo(trainer, tmp, steps=20)
        base += ["--set", "model.n_layers=2"]  # one per pipeline stage of 2x2x2
        single = ["--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set", "parallel.sequence_parallel=false"]

        def train(run, np_, extra, ok_codes=(0,), env=None):
            cmd = ([mpiexec, "-np", str(np_)] if np_ > 1 else []) + [trainer, "train", recipe, *base,
                                                                  "--set", f"run.dir={run}", *extra]
            return run_cmd(cmd, ok_codes, env)[1]

        for name, np_, layout in [("1 process", 1, single), ("2x2x2", 8, [])]:
            a, b = os.path.join(tmp, f"straight_{np_}"), os.path.join(tmp, f"resumed_{np_}")
            train(a, np_, layout + ["--set", "checkpoint.every=20"])
            train(b, np_, layout + ["--set", "checkpoint.every=10", "--set", "training.exit_after=10"])
            out = train(b, np_, layout + ["--set", "checkpoint.every=10"])
            check("resumed from" in out and "at step 10" in out, f"{name}: resumed at step 10")
            la, lb = losses(a), losses(b)
            check(all(la[s] == lb[s] for s in range(11, 21)), f"{name}: losses after the resume equal the straight run")
            ta, tb = tensors(a + "/checkpoints/step_00000020"), tensors(b + "/checkpoints/step_00000020")
            check(same_tensors(ta, tb), f"{name}: final weights and AdamW state bit-identical ({len(ta)} tensors)")

        # A checkpoint of another model shape: refused by the recipe comparison
        # (exit 2); let past it, the tensors themselves do not fit (exit 4).
        step10 = os.path.join(tmp, "resumed_8", "checkpoints", "step_00000010")
        out = train(os.path.join(tmp, "mismatch"), 1, single + ["--set", "model.d_ff=512", "--resume", step10],
                    ok_codes=(2,))
        check("model.d_ff 768 -> 512" in out, "another model shape is refused naming the recipe key that differs")
        out = train(os.path.join(tmp, "mismatch"), 1, single + ["--set", "model.d_ff=512", "--resume", step10,
                                                                "--set", 'checkpoint.allow_changes=["model.*"]'],
                    ok_codes=(4,))
        check("does not match the model" in out and "mlp.w_fc (checkpoint 768x192, model 512x192)" in out,
              "a checkpoint of another shape is refused with the mismatched tensors listed")

        # Async saves write what blocking saves write, and resume exactly.
        a = os.path.join(tmp, "async")
        train(a, 8, ["--set", "checkpoint.every=5", "--set", "checkpoint.async=true", "--set", "training.exit_after=10"])
        out = train(a, 8, ["--set", "checkpoint.every=5", "--set", "checkpoint.async=true"])
        check("at step 10" in out, "async: resumed at step 10")
        ta, tb = tensors(os.path.join(tmp, "straight_8", "checkpoints", "step_00000020")), tensors(a + "/checkpoints/step_00000020")
        check(same_tensors(ta, tb),
              "async: final checkpoint bit-identical to the straight run's blocking one")
        check(losses(a)[20] == losses(os.path.join(tmp, "straight_8"))[20], "async: same final loss")

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

        # Crash safety: SIGKILL inside the save at step 10, at each stage.
        dp2 = single  # 2 ranks as dp = 2
        straight = os.path.join(tmp, "crash_straight")
        train(straight, 2, dp2)
        for point in ["shards_written", "manifest_written", "renamed", "latest_written"]:
            run = os.path.join(tmp, "crash_" + point)
            env = dict(os.environ, TRAINER_FAULT=f"ckpt_kill point={point} step=10")
            p = subprocess.run([mpiexec, "-np", "2", trainer, "train", recipe, *base, *dp2, "--set", f"run.dir={run}",
                                "--set", "checkpoint.every=5"], capture_output=True, text=True, env=env)
            latest = open(run + "/checkpoints/latest").read().strip()
            v = subprocess.run([trainer, "ckpt", "verify", run + "/checkpoints"], capture_output=True, text=True)
            train(run, 2, dp2 + ["--set", "checkpoint.every=5"])
            la, lb = losses(straight), losses(run)
            check(p.returncode != 0 and v.returncode == 0 and latest in ("step_00000005", "step_00000010")
                  and all(la[s] == lb[s] for s in range(11, 21)),
                  f"killed at {point}: latest = {latest} verifies, resumed run equals the straight one")

        # A checkpoint directory that cannot be made (it lies under a regular
        # file) is a start-up error naming the key. Saves failing later (a
        # full disk) are in tests/e2e/reliability_check.py.
        blocker = os.path.join(tmp, "not_a_dir")
        open(blocker, "w").close()
        run = os.path.join(tmp, "failing")
        out = train(run, 1, single + ["--set", "checkpoint.every=5", "--set", f"checkpoint.dir={blocker}/ckpt"],
                    ok_codes=(2,))
        check("cannot create ([checkpoint] dir)" in out and "step " not in out,
              "an unwritable checkpoint directory stops the run before training (exit 2)")

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
        moved = glob.glob(run + "/checkpoints/previous/*/step_00000020")
        check(len(moved) == 1, "the corrupted newer checkpoint is moved aside, not deleted or overwritten")
        out = train(run, 1, single + ["--resume", moved[0] if moved else "missing"], ok_codes=(4,))
        check("checksum mismatch" in out, "resuming the corrupted checkpoint by path fails with exit code 4")

        # Tampered manifests and `latest`: each checkpoint refused by name, the next older one that verifies used.
        def tampered(label, edit, words, latest=None):
            r = os.path.join(tmp, "tamper_" + label.split()[0])
            train(r, 1, single + ["--set", "checkpoint.every=5", "--set", "training.steps=15"])
            man = r + "/checkpoints/step_00000015/manifest"
            text = open(man).read()
            open(man, "w").write(edit(text))
            if latest is not None:
                open(r + "/checkpoints/latest", "w").write(latest)
            out = train(r, 1, single + ["--set", "training.steps=20", "--set", "checkpoint.every=5"])
            ok = all(w in out for w in words) and "step_00000010 at step 10" in out
            check(ok, f"a manifest {label}: refused by name, step 10 resumed instead")
            if not ok:
                print(out[-1500:])
            return r
        def no_crc(t):  # as a manifest of an earlier release, without its own checksum
            return "".join(l for l in t.splitlines(True) if not l.startswith("crc "))
        tampered("saying another step (15 -> 7)", lambda t: no_crc(t).replace("\nstep 15\n", "\nstep 7\n"),
                 ["says step 7 but its directory is step_00000015"])
        tampered("with a checksum that no longer matches (samples edited)", lambda t: t.replace("samples ", "samples 1"),
                 ["checksum does not match"])
        tampered("extended by a line after its end", lambda t: t + "samples 999\n", ["a line after its end"])
        tampered("naming a file outside its directory", lambda t: no_crc(t).replace("file ", "file ../", 1),
                 ["not a file of this checkpoint's directory"])
        r = os.path.join(tmp, "tamper_latest")
        train(r, 1, single + ["--set", "checkpoint.every=5", "--set", "training.steps=10"])
        open(r + "/checkpoints/latest", "w").write("../../../etc\n")
        out = train(r, 1, single + ["--set", "training.steps=15", "--set", "checkpoint.every=5",
                                    "--resume", r + "/checkpoints"])
        check("latest names \"../../../etc\"" in out and "step_00000010 at step 10" in out,
              "a `latest` that leads out of the checkpoint directory is ignored (the newest step directory is used)")
        # Export: a 2x2x2 run evaluated at step 10 and checkpointed there.
        run = os.path.join(tmp, "export")
        train(run, 8, ["--set", f'data.val=["{data}/val_*.bin"]', "--set", "training.eval_every=10",
                       "--set", "training.eval_batches=2", "--set", "checkpoint.every=10",
                       "--set", "training.exit_after=10"])
        val = [r["val_loss"] for r in map(json.loads, open(run + "/metrics.jsonl")) if "val_loss" in r][0]
        step = run + "/checkpoints/step_00000010"
        v = subprocess.run([trainer, "ckpt", "verify", step], capture_output=True, text=True)
        check(v.returncode == 0 and "ok" in v.stdout, "ckpt verify passes")
        out = os.path.join(tmp, "export.h5")
        subprocess.run([trainer, "ckpt", "export", step, "--output", out], check=True, stdout=subprocess.DEVNULL)
        demo = dict(arch="gpt2", vocab_size=256, d_model=192, n_layers=2, n_heads=6, n_kv_heads=6,
                    d_ff=768, seq_len=128, tie_embeddings=True, norm_eps=1e-5, rope_theta=10000.0)
        got = torch_val_loss(out, demo, glob.glob(data + "/val_*.bin")[0], 2 * 2 * 2)  # eval_batches x micro x dp
        check(abs(got - val) / val < 1e-5, f"PyTorch from the export reproduces val loss {val:.7f} ({got:.7f})")
        # bf16 export: HDF5 converts its bf16 type back to fp32 by itself; the
        # values are PyTorch's bf16 rounding of the fp32 export's.
        out16 = os.path.join(tmp, "export_bf16.h5")
        subprocess.run([trainer, "ckpt", "export", step, "--output", out16, "--dtype", "bf16"], check=True,
                       stdout=subprocess.DEVNULL)
        with h5py.File(out, "r") as a, h5py.File(out16, "r") as b:
            names = sorted(_datasets(a))
            same = names == sorted(_datasets(b)) and all(
                torch.equal(torch.tensor(a[n][()]).bfloat16().float(), torch.tensor(b[n].astype("f4")[()]))
                for n in names)
            check(same and all(b[n].id.get_type().get_size() == 2 for n in names),
                  f"bf16 export: {len(names)} tensors of 2 bytes, each equal to PyTorch's bf16 rounding of the fp32 export")
    sys.exit(1 if failures else 0)


def _datasets(h):
    out = []
    h.visititems(lambda n, d: out.append(n) if isinstance(d, h5py.Dataset) else None)
    return out


if __name__ == "__main__":
    main()
