#!/usr/bin/python3
"""The data-parallel reduction through the real binary: ZeRO-1, 2 and 3
(`parallel.zero_stage`) and overlapped buckets, on the demo model (2
layers, 20 steps, every step logged):

- zero_stage 1, 2 and 3 train as zero_stage 0: losses within 1e-6 relative
  at every step (ZeRO-1: bit-identical is what the reduction order here
  gives; ZeRO-2 and 3 sum each micro-batch over the replicas first: 1e-5)
  for dp 4, dp 2 x tp 2 (sequence parallel, bf16, one micro-batch),
  dp 2 x pp 2 (interleaved, full recompute), dp 2 x pp 2 with clipping and
  a NaN update skipped, dp 2 with a NaN rolled back to the last checkpoint
  (training.on_nan = "rollback"); ZeRO-2 in dp 4, the tp layout and the
  rollback only;
- each rank's optimizer memory (metrics.jsonl's peak) is 1/dp of zero 0's
  (ZeRO-1: its block plus a tail of fewer than dp elements; ZeRO-2, 3: its
  slice of every unit) and what `trainer plan` predicts for the recipe; so
  are the gradients' (ZeRO-2, 3) and the weights' (ZeRO-3);
- under ZeRO each data-parallel rank writes its own checkpoint file
  (pp*_tp*_dp*.h5, about 1/dp of zero 0's file), and the weights, m and v
  put together from those files here (h5py, from each dataset's
  global_shape / shard / flat attributes) equal zero 0's;
- gradient buckets started during the backward (parallel.dp_overlap) give
  the same losses, bit for bit, as buckets started after it;
- a checkpoint written under dp 4 with ZeRO-1 resumes under dp 2 without it
  and back under dp 4 with it: losses within 1e-7 of the uninterrupted run;
  dp 4 with ZeRO-3 stopped and resumed: bit for bit, and its checkpoint
  resumed as one process: within 1e-6; dp 4 with ZeRO-3 ->
  dp 2 with ZeRO-1 -> one process -> dp 4 with ZeRO-3: within 1e-6; one
  written under dp 2 x tp 2 with ZeRO-1 or 3 (zero_persist_below: a
  layer's norms and biases gathered once a step) resumes under pp 2 x tp 2
  with the losses of a resume from zero 0's files, bit for bit;
- a 24-layer Llama that does not fit 0.33 GB a rank under ZeRO-1 at dp 4
  is shown by `trainer plan` to fit under ZeRO-3, and trains so.

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

LAYOUTS = [  # (name, ranks, --set arguments); plain dp 2 is the rollback's
    ("dp 4", 4, []),
    # One micro-batch per step: ZeRO-2 rounds the gradients to bf16 for the
    # wire once per micro-batch, ZeRO-0 once per step; with one they round
    # alike (with four the runs differ at bf16's rounding, which this demo's
    # loss spike at step 11 grows to 10%).
    ("dp 2 x tp 2, sequence parallel, bf16, one micro-batch", 4,
     ["parallel.tp=2", "parallel.sequence_parallel=true", "training.precision=bf16", "training.micro_batch=8"]),
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

        def check_sharded_files(name, dp, whole_dir, sharded_dir, same_sums=True):
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
            if same_sums:
                diff = max(float(np.max(np.abs(a[k] - b[k]) / (np.abs(a[k]) + 1e-6))) for k in a) if a.keys() == b.keys() else 1
                check(a.keys() == b.keys() and holes == 0 and diff <= 1e-5,
                      f"{name}: weights, m and v put together from the per-rank files equal zero 0's "
                      f"({len(b)} tensors, {holes} values missing, worst relative difference {diff:.1e})")
                return
            # Sums taken in another order: the weights close to zero 0's (each
            # tensor's relative norm of the difference; the key bias, whose
            # gradient is rounding noise, left out), m and v complete.
            weights = [k for k in a if k[0] == "param" and ".attn.bk" not in k[1]]
            diff = max(float(np.linalg.norm(a[k] - b[k]) / np.linalg.norm(a[k])) for k in weights) if a.keys() == b.keys() else 1
            check(a.keys() == b.keys() and holes == 0 and diff <= 1e-4,
                  f"{name}: weights, m and v put together from the per-rank files: none missing, the weights "
                  f"within {diff:.1e} of zero 0's ({len(b)} tensors)")

        def plan_mb(ranks, sets, column):
            """Stage 0's row of `trainer plan` for the recipe's mode: a column's MB."""
            args = [a for s in sets for a in ("--set", s)]
            _, out = run([trainer, "plan", DEMO_RECIPE, *base, *args, "--ranks", str(ranks)])
            for line in out.splitlines():
                f = line.split()
                if len(f) > 8 and f[0] == "0" and f[1].endswith("*"):
                    return float(f[{"params": 2, "grads": 3, "optimizer": 4}[column]])
            raise SystemExit("no stage-0 row in trainer plan's output:\n" + out)

        for i, (name, ranks, sets) in enumerate(LAYOUTS):
            a = train(f"z0_{i}", ranks, ["checkpoint.every=20"] + sets + ["parallel.zero_stage=0"])
            # ZeRO-2 shards the gradients as ZeRO-3 does: dp 4, tp with bf16
            # and a rollback show it; the other layouts run ZeRO-1 and 3 only
            # (CI minutes; test_zero has ZeRO-2 in every layout).
            for z in (1, 2, 3) if i in (0, 1, 4) else (1, 3):
                b = train(f"z{z}_{i}", ranks, ["checkpoint.every=20"] + sets + [f"parallel.zero_stage={z}"])
                # A step done again after a rollback: its last record counts.
                la, lb = (list({r["step"]: r["loss"] for r in x}.values()) for x in (a, b))
                worst = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
                # ZeRO-2 sums each micro-batch over the replicas, then the
                # micro-batches: other roundings, grown over 20 steps.
                bound = 1e-6 if z == 1 else 1e-5  # (ZeRO-3 reduces as ZeRO-2)
                check(len(la) == len(lb) == 20 and worst <= bound,
                      f"{name}: zero {z} losses equal zero 0's over 20 steps within {bound:.0e} "
                      f"(worst relative difference {worst:.2e})")
                dp = ranks // ((2 if "parallel.tp=2" in sets else 1) * (2 if "parallel.pp=2" in sets else 1))
                oa, ob = a[-1]["mem_peak_optimizer_mb"], b[-1]["mem_peak_optimizer_mb"]
                plan = plan_mb(ranks, sets + [f"parallel.zero_stage={z}"], "optimizer")
                check(abs(ob - oa / dp) <= 1e-3 * oa and abs(ob - plan) <= 0.051,
                      f"{name}: zero {z} optimizer memory per rank {ob:.3f} MB = 1/{dp} of zero 0's {oa:.3f} MB "
                      f"(`trainer plan`: {plan} MB)")
                # 2 layers: the embedding's whole gradient (and ZeRO-3's
                # gathered embedding) outweigh the saving.
                for kind in ("grads", "params") if z == 3 else ("grads",) if z == 2 else ():
                    ma, mb = a[-1][f"mem_peak_{kind}_mb"], b[-1][f"mem_peak_{kind}_mb"]
                    plan = plan_mb(ranks, sets + [f"parallel.zero_stage={z}"], kind)
                    check(abs(mb - plan) <= 0.051,
                          f"{name}: zero {z} {kind} memory per rank {mb:.3f} MB (zero 0's {ma:.3f} MB) as "
                          f"`trainer plan` predicts: {plan} MB")
                if "NaN" in name:
                    check(sum("update_skipped" in r for r in b) == 1, f"{name}: the NaN step is skipped under zero {z}")
                if "rolled back" in name:
                    check(len(b) > 20, f"{name}: under zero {z} the steps after the checkpoint ran again "
                                       f"({len(b)} records)")
                check_sharded_files(f"{name}, zero {z}", dp,
                                    *(os.path.join(tmp, f"z{x}_{i}", "checkpoints", "step_00000020") for x in (0, z)),
                                    same_sums=z == 1 or "one micro-batch" in name)

        # Buckets started during the backward or after it: the same sums. Small
        # buckets (many of them), and the held-back tensors: a tied embedding
        # across stages, sequence-parallel partial gradients.
        cases = (("dp 2 x pp 2, tied embedding, 4 layers, 25 MB buckets", 4, ["parallel.pp=2", "model.n_layers=4"]),
                 ("dp 2 x tp 2, sequence parallel, 4 layers, 25 MB buckets", 4,
                  ["parallel.tp=2", "parallel.sequence_parallel=true", "model.n_layers=4"]),
                 ("dp 2 x tp 2, sequence parallel, bf16, 0.05 MB buckets", 4,
                  ["parallel.tp=2", "parallel.sequence_parallel=true", "training.precision=bf16",
                   "parallel.dp_bucket_mb=0.05"]))
        for i, (name, ranks, sets) in enumerate(cases):
            a = train(f"overlap_on_{i}", ranks, sets + ["parallel.dp_overlap=true"])
            b = train(f"overlap_off_{i}", ranks, sets + ["parallel.dp_overlap=false"])
            check([r["loss"] for r in a] == [r["loss"] for r in b] and all("comm_dp_exposed_ms" in r for r in a),
                  f"{name}: buckets overlapping the backward give bit-identical losses to buckets after it "
                  f"(exposed {sum(r['comm_dp_exposed_ms'] for r in a):.0f} vs "
                  f"{sum(r['comm_dp_exposed_ms'] for r in b):.0f} ms over 20 steps on one machine)")

        def resume_chain(name, common, legs, straight, bound):
            """Trains run `name` in legs of (ranks, zero stage, steps; None: to the
            end), each resuming the last's checkpoint, and checks its losses
            within `bound` of the straight run's."""
            for ranks, zero, steps in legs:
                rec = train(name, ranks, common + [f"parallel.zero_stage={zero}"] +
                            ([f"training.exit_after={steps}"] if steps else []))
            got = {r["step"]: r["loss"] for r in rec}
            worst = max(abs(got[k + 1] - straight[k]) / straight[k] for k in range(20))
            path = " -> ".join(f"{'one process' if r == 1 else f'dp {r}'} zero {z}" for r, z, _ in legs)
            check(len(got) == 20 and worst <= bound,
                  f"{path} resumes within {bound:.0e} of the straight run (worst relative difference {worst:.2e})")

        # Resume across data-parallel sizes and zero stages.
        straight = [r["loss"] for r in train("straight", 4, ["parallel.zero_stage=1"])]
        resume_chain("chain", ["checkpoint.every=5"], [(4, 1, 10), (2, 0, 5), (4, 1, None)], straight, 1e-7)

        # ZeRO-3: a resume in the same layout continues bit for bit; as ZeRO-1
        # on dp 2, as one process, and from ZeRO-0 back within 1e-6 (one
        # micro-batch a step on dp 4: ZeRO-3 sums as ZeRO-0 does there).
        chain = ["checkpoint.every=5", "training.micro_batch=4"]
        straight = [r["loss"] for r in train("straight_3", 4, ["parallel.zero_stage=3", "training.micro_batch=4"])]
        train("again_3", 4, chain + ["parallel.zero_stage=3", "training.exit_after=10"])
        again = {r["step"]: r["loss"] for r in train("again_3", 4, chain + ["parallel.zero_stage=3"])}
        check([again.get(k + 1) for k in range(20)] == straight,
              "dp 4 zero 3 stopped at step 10 and resumed: the losses of the straight run, bit for bit")
        step10 = os.path.join(tmp, "again_3", "checkpoints", "step_00000010")
        one = {r["step"]: r["loss"] for r in train("one_from_3", 1, chain + [
            "parallel.zero_stage=0", "training.exit_after=5", f'checkpoint.resume="{step10}"'])}
        worst = max(abs(one[k] - straight[k - 1]) / straight[k - 1] for k in range(11, 16)) if sorted(one) == list(range(11, 16)) else 1
        check(worst <= 1e-6, f"its dp 4 zero 3 checkpoint of step 10 resumed as one process: steps 11-15 within 1e-6 of "
                             f"the straight run (worst relative difference {worst:.2e})")
        resume_chain("chain_3", chain, [(4, 3, 5), (2, 1, 5), (1, 0, 5), (4, 3, None)], straight, 1e-6)

        # A Llama that does not fit a per-rank budget under ZeRO-1 at dp 4:
        # `trainer plan` says ZeRO-3 fits, and it trains so.
        llama = ["model.arch=\"llama\"", "model.n_layers=24"]
        budget = ["--memory-per-rank-gb", "0.33", "--ranks", "4"]
        _, z1 = run([trainer, "plan", DEMO_RECIPE, *base, *(a for s in llama for a in ("--set", s)),
                     "--set", "parallel.zero_stage=1", *budget])
        _, z3 = run([trainer, "plan", DEMO_RECIPE, *base, *(a for s in llama for a in ("--set", s)),
                     "--set", "parallel.zero_stage=3", *budget])
        last1, last3 = z1.strip().splitlines()[-1], z3.strip().splitlines()[-1]
        check(last1.startswith("does NOT fit") and "parallel.zero_stage = 3 (" in last1 and
              last1.split("parallel.zero_stage = 3 (")[1].split(")")[0].endswith("fits") and last3.startswith("fits"),
              f"24-layer Llama at dp 4 in 0.33 GB a rank: ZeRO-1 does not fit, `trainer plan` says ZeRO-3 does "
              f"({last1[:40]}...; {last3[:60]}...)")
        rec = train("llama_zero3", 4, llama + ["parallel.zero_stage=3", "training.steps=4"])
        check(len(rec) == 4 and rec[-1]["loss"] < rec[0]["loss"],
              f"... and it trains under ZeRO-3 (loss {rec[0]['loss']:.3f} -> {rec[-1]['loss']:.3f} in 4 steps, "
              f"params + grads + optimizer {sum(rec[-1][f'mem_peak_{k}_mb'] for k in ('params', 'grads', 'optimizer')):.1f} MB a rank)")

        # Per-rank files (cut tensors) resumed under other tensor and pipeline
        # sizes: zero 1 and 2 write the same values as zero 0 (checked above),
        # so resuming from any set of files must give the same losses, bit
        # for bit.
        # (One micro-batch per step: ZeRO-2 sums in zero 0's order there; its
        # files are cut as ZeRO-3's, so ZeRO-3 stands for it: CI minutes.)
        first = ["parallel.tp=2", "model.n_layers=4", "checkpoint.every=5", "training.exit_after=10",
                 "training.micro_batch=8"]
        then = ["parallel.pp=2", "parallel.tp=2", "model.n_layers=4", "checkpoint.every=5", "parallel.zero_stage=0"]
        resumed = {}
        for z in (0, 1, 3):  # (ZeRO-3 with the layers' norms and biases persisting)
            persist = ["parallel.zero_persist_below=100000"] if z == 3 else []
            train(f"chain_tp_pp_{z}", 4, first + [f"parallel.zero_stage={z}"] + persist)
            resumed[z] = [r["loss"] for r in train(f"chain_tp_pp_{z}", 4, then) if r["step"] > 10]
        for z in (1, 3):
            check(len(resumed[z]) == 10 and resumed[0] == resumed[z],
                  f"dp 2 x tp 2 with ZeRO-{z}{' (norms and biases persisting)' if z == 3 else ''} -> pp 2 x tp 2: resuming from the per-rank files gives the losses of "
                  f"resuming from zero 0's files, bit for bit (steps 11-20)")
    finish("ZeRO-1, 2 and 3")


if __name__ == "__main__":
    main()
