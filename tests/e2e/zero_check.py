#!/usr/bin/python3
"""The data-parallel reduction through the real binary: ZeRO-1
(`parallel.zero_stage = 1`) and overlapped buckets, on the demo
model (2 layers, 20 steps, every step logged):

- zero_stage 1 trains as zero_stage 0: losses within 1e-6 relative at every
  step (bit-identical is what the reduction order here gives) for dp 2, dp 4,
  dp 2 x tp 2 (sequence parallel, bf16), dp 2 x pp 2 (interleaved, full
  recompute), dp 2 x pp 2 with clipping and a NaN update skipped, dp 2 with
  a NaN rolled back to the last checkpoint (training.on_nan = "rollback");
- each rank's optimizer memory (metrics.jsonl's peak) is 1/dp of zero 0's
  (its block plus a tail of fewer than dp elements) and what `trainer plan`
  predicts for the recipe;
- under ZeRO-1 each data-parallel rank writes its own checkpoint file
  (pp*_tp*_dp*.h5, about 1/dp of zero 0's file), and the weights, m and v
  put together from those files here (h5py, from each dataset's
  global_shape / shard / flat attributes) equal zero 0's;
- gradient buckets started during the backward (parallel.dp_overlap) give
  the same losses, bit for bit, as buckets started after it;
- a checkpoint written under dp 4 with ZeRO-1 resumes under dp 2 without it
  and back under dp 4 with it: losses within 1e-7 of the uninterrupted run;
  one written under dp 2 x tp 2 with ZeRO-1 resumes under pp 2 x tp 2 with
  the losses of a resume from zero 0's files, bit for bit.

usage: zero_check.py TRAINER MPIEXEC
"""
import glob
import json
import os
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import DEMO_RECIPE, check, finish, run, small_demo  # noqa: E402

LAYOUTS = [  # (name, ranks, --set arguments)
    ("dp 2", 2, []),
    ("dp 4", 4, []),
    ("dp 2 x tp 2, sequence parallel, bf16", 4,
     ["parallel.tp=2", "parallel.sequence_parallel=true", "training.precision=bf16"]),
    ("dp 2 x pp 2, interleaved, full recompute", 4,
     ["parallel.pp=2", "model.n_layers=4", "parallel.schedule=interleaved", "recompute.mode=full"]),
    ("dp 2 x pp 2, grad clip 0.5, a NaN update skipped", 4,
     ["parallel.pp=2", "training.grad_clip=0.5", 'training.on_nan="skip"', 'fault.inject=["nan step=5"]']),
    ("dp 2, step 8 rolled back to the step-5 checkpoint", 2,
     ["checkpoint.every=5", 'training.on_nan="rollback"', 'fault.inject=["nan step=8"]']),
]


def records(run_dir):
    return [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]


def assemble(step_dir):
    """(group, tensor) -> global array from every shard file of a step
    directory, written independently of the trainer's reader."""
    import h5py
    out = {}

    def place(path, d):
        if not isinstance(d, h5py.Dataset):
            return
        group, name = path.split("/", 1)
        shape = tuple(int(x) for x in d.attrs["global_shape"])
        arr = out.setdefault((group, name), np.full(shape, np.nan, np.float32))
        R, C = shape[0], (shape[1] if len(shape) == 2 else 1)
        dim, start = (int(x) for x in d.attrs["shard"])
        data = d[()].astype(np.float32).reshape(-1)
        lo, n, slice_n = (int(x) for x in d.attrs["flat"]) if "flat" in d.attrs else (0, data.size, data.size)
        index = np.arange(R * C).reshape(R, C)
        if dim == 0:
            index = index[start:start + slice_n // C, :]
        elif dim == 1:
            index = index[:, start:start + slice_n // R]
        arr.reshape(-1)[index.reshape(-1)[lo:lo + n]] = data

    for f in sorted(glob.glob(os.path.join(step_dir, "*.h5"))):
        with h5py.File(f, "r") as h:
            h.visititems(place)
    return out


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        _, base = small_demo(trainer, tmp, steps=20)
        base += ["--set", "model.n_layers=2", "--set", "parallel.pp=1", "--set", "parallel.tp=1",
                 "--set", "runtime.peak_gflops=100"]

        def train(name, ranks, sets, extra=()):
            args = [a for s in sets for a in ("--set", s)]
            run([mpiexec, "-np", str(ranks), trainer, "train", DEMO_RECIPE, *base, *args,
                 "--set", f"run.dir={os.path.join(tmp, name)}", *extra])
            return records(os.path.join(tmp, name))

        def check_sharded_files(name, dp, whole_dir, sharded_dir):
            a, b = assemble(whole_dir), assemble(sharded_dir)
            whole = sorted(os.path.basename(f) for f in glob.glob(whole_dir + "/*.h5"))
            parts = sorted(os.path.basename(f) for f in glob.glob(sharded_dir + "/*.h5"))
            expected = sorted(f[:-3] + f"_dp{d}.h5" for f in whole for d in range(dp))
            # A later pipeline stage's flat buffer also holds the tied embedding's
            # copy (saved by stage 0 only): its blocks are cut from a longer buffer.
            tied = 12 * a[("param", "embed.tok")].size if len(whole) > 1 and ("param", "embed.tok") in a else 0
            worst = 0.0
            for f in whole:
                size = os.path.getsize(os.path.join(whole_dir, f))
                mine = [os.path.getsize(os.path.join(sharded_dir, f[:-3] + f"_dp{d}.h5")) for d in range(dp)
                        if f[:-3] + f"_dp{d}.h5" in parts]
                bound = (size + (tied if not f.startswith("pp0_") else 0)) / dp
                worst = max([worst] + [m / bound for m in mine])
            check(parts == expected and worst <= 1.02,
                  f"{name}: every data-parallel rank wrote its own file ({len(parts)}: {', '.join(parts)}), "
                  f"each at most {worst:.3f} of 1/{dp} of zero 0's")
            holes = sum(int(np.isnan(v).sum()) for v in b.values())
            diff = max(float(np.max(np.abs(a[k] - b[k]) / (np.abs(a[k]) + 1e-6))) for k in a) if a.keys() == b.keys() else 1
            check(a.keys() == b.keys() and holes == 0 and diff <= 1e-5,
                  f"{name}: weights, m and v put together from the ZeRO-1 files equal zero 0's "
                  f"({len(b)} tensors, {holes} values missing, worst relative difference {diff:.1e})")

        def plan_optimizer_mb(ranks, sets):
            args = [a for s in sets for a in ("--set", s)]
            _, out = run([trainer, "plan", DEMO_RECIPE, *base, *args, "--ranks", str(ranks)])
            for line in out.splitlines():
                f = line.split()
                if len(f) > 8 and f[0] == "0" and f[1].endswith("*"):
                    return float(f[4])
            raise SystemExit("no stage-0 row in trainer plan's output:\n" + out)

        for i, (name, ranks, sets) in enumerate(LAYOUTS):
            a = train(f"z0_{i}", ranks, ["checkpoint.every=20"] + sets + ["parallel.zero_stage=0"])
            b = train(f"z1_{i}", ranks, ["checkpoint.every=20"] + sets + ["parallel.zero_stage=1"])
            # A step done again after a rollback: its last record counts.
            la, lb = list({r["step"]: r["loss"] for r in a}.values()), list({r["step"]: r["loss"] for r in b}.values())
            worst = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
            check(len(la) == len(lb) == 20 and worst <= 1e-6,
                  f"{name}: zero 1 losses equal zero 0's over 20 steps (worst relative difference {worst:.2e})")
            dp = ranks // ((2 if "parallel.tp=2" in sets else 1) * (2 if "parallel.pp=2" in sets else 1))
            oa, ob = a[-1]["mem_peak_optimizer_mb"], b[-1]["mem_peak_optimizer_mb"]
            plan = plan_optimizer_mb(ranks, sets + ["parallel.zero_stage=1"])
            check(abs(ob - oa / dp) <= 1e-3 * oa and abs(ob - plan) <= 0.051,
                  f"{name}: optimizer memory per rank {ob:.3f} MB = 1/{dp} of zero 0's {oa:.3f} MB "
                  f"(`trainer plan`: {plan} MB)")
            if "NaN" in name:
                check(sum("update_skipped" in r for r in b) == 1, f"{name}: the NaN step is skipped under ZeRO-1")
            if "rolled back" in name:
                check(len(b) > 20, f"{name}: under ZeRO-1 the steps after the checkpoint ran again ({len(b)} records)")
            check_sharded_files(name, dp, *(os.path.join(tmp, f"z{z}_{i}", "checkpoints", "step_00000020")
                                            for z in (0, 1)))

        # Buckets started during the backward or after it: the same sums. Small
        # buckets (many of them), and the held-back tensors: a tied embedding
        # across stages, sequence-parallel partial gradients.
        cases = (("dp 2 x pp 2, tied embedding, 4 layers, 25 MB buckets", 4, ["parallel.pp=2", "model.n_layers=4"]),
                 ("dp 2 x tp 2, sequence parallel, 4 layers, 25 MB buckets", 4,
                  ["parallel.tp=2", "parallel.sequence_parallel=true", "model.n_layers=4"]),
                 ("dp 2 x tp 2, sequence parallel, bf16, 0.05 MB buckets", 4,
                  LAYOUTS[2][2] + ["parallel.dp_bucket_mb=0.05"]))
        for i, (name, ranks, sets) in enumerate(cases):
            a = train(f"overlap_on_{i}", ranks, sets + ["parallel.dp_overlap=true"])
            b = train(f"overlap_off_{i}", ranks, sets + ["parallel.dp_overlap=false"])
            check([r["loss"] for r in a] == [r["loss"] for r in b] and all("comm_dp_exposed_ms" in r for r in a),
                  f"{name}: buckets overlapping the backward give bit-identical losses to buckets after it "
                  f"(exposed {sum(r['comm_dp_exposed_ms'] for r in a):.0f} vs "
                  f"{sum(r['comm_dp_exposed_ms'] for r in b):.0f} ms over 20 steps on one machine)")

        # Resume across data-parallel sizes and zero stages.
        straight = [r["loss"] for r in train("straight", 4, ["parallel.zero_stage=1"])]
        chain = ["checkpoint.every=5"]
        train("chain", 4, chain + ["parallel.zero_stage=1", "training.exit_after=10"])
        train("chain", 2, chain + ["parallel.zero_stage=0", "training.exit_after=5"])
        got = {r["step"]: r["loss"] for r in train("chain", 4, chain + ["parallel.zero_stage=1"])}
        worst = max(abs(got[k + 1] - straight[k]) / straight[k] for k in range(20))
        check(len(got) == 20 and worst <= 1e-7,
              f"dp 4 zero 1 -> dp 2 zero 0 -> dp 4 zero 1 resumes within 1e-7 of the straight run "
              f"(worst relative difference {worst:.2e})")

        # ZeRO-1 files (cut tensors) resumed under other tensor and pipeline
        # sizes: zero 1 and zero 0 write the same values (checked above), so
        # resuming from either set of files must give the same losses, bit
        # for bit.
        first = ["parallel.tp=2", "model.n_layers=4", "checkpoint.every=5", "training.exit_after=10"]
        then = ["parallel.pp=2", "parallel.tp=2", "model.n_layers=4", "checkpoint.every=5", "parallel.zero_stage=0"]
        resumed = {}
        for z in (0, 1):
            train(f"chain_tp_pp_{z}", 4, first + [f"parallel.zero_stage={z}"])
            resumed[z] = [r["loss"] for r in train(f"chain_tp_pp_{z}", 4, then) if r["step"] > 10]
        check(len(resumed[1]) == 10 and resumed[0] == resumed[1],
              f"dp 2 x tp 2 with ZeRO-1 -> pp 2 x tp 2: resuming from the per-rank files gives the losses of "
              f"resuming from zero 0's files, bit for bit (steps 11-20)")
    finish("ZeRO-1")


if __name__ == "__main__":
    main()
