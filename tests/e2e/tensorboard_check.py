"""`[metrics] tensorboard = true` through the real binary, read back with
TensorBoard's own reader (tensorboard 2.21.0's EventAccumulator, from PyPI
in third_party/pyref): every number of every metrics.jsonl record is a
scalar at that record's step with the same value (as float32, within the
ulp that JSON's 9 digits can move it), and the
records' CRCs check (the reader verifies them).

usage: tensorboard_check.py TRAINER MPIEXEC
"""
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, failures, tiny_recipe, under_pyref  # noqa: E402

(ea_mod, np) = under_pyref(["tensorboard.backend.event_processing.event_accumulator", "numpy"])


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="tb_")
    data, run_dir = os.path.join(tmp, "data"), os.path.join(tmp, "run")
    subprocess.run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses", "--output", data],
                   check=True, capture_output=True)
    recipe = os.path.join(tmp, "tb.toml")
    tiny_recipe(recipe, {"run.name": "tb", "run.dir": run_dir, "model.arch": "llama", "model.n_kv_heads": 2,
                         "data.train": [{"path": f"{data}/train_*.bin", "weight": 0.6, "name": "a"},
                                        {"path": f"{data}/train_*.bin", "weight": 0.4, "name": "b"}],
                         "data.val": [{"path": f"{data}/val_*.bin", "name": "a"}],
                         "training.steps": 12, "training.micro_batch": 1, "training.log_every": 2,
                         "training.eval_every": 6, "training.eval_batches": 1, "parallel.pp": 2,
                         "metrics.tensorboard": True})
    p = subprocess.run([mpiexec, "-np", "2", trainer, "train", recipe], capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, "a 2-rank run with [metrics] tensorboard = true"):
        print(p.stdout + p.stderr)
        sys.exit(1)
    tb_dir = os.path.join(run_dir, "tensorboard")
    files = [f for f in os.listdir(tb_dir) if f.startswith("events.out.tfevents.")]
    check(len(files) == 1, f"one event file in RUN_DIR/tensorboard: {files}")
    acc = ea_mod.EventAccumulator(tb_dir, size_guidance={ea_mod.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want = {}
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        r = json.loads(line)
        for k, v in r.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                want[(k, r["step"])] = v
            elif k.startswith("pp_") and isinstance(v, list):  # per pipeline stage: one tag each
                for i, x in enumerate(v):
                    if x is not None:
                        want[(f"{k}/stage{i}", r["step"])] = x
    got = {(t, e.step): e.value for t in tags for e in acc.Scalars(t)}
    missing = [k for k in want if k not in got]
    # JSON keeps 9 significant digits, so its float32 may differ from the one written by an ulp.
    wrong = [k for k in want if k in got and abs(got[k] - np.float32(want[k])) > np.spacing(np.float32(want[k]))]
    check(not missing and not wrong and len(got) == len(want),
          f"all {len(want)} numbers of metrics.jsonl ({len({k for k, _ in want})} tags) read back by TensorBoard, "
          f"equal as float32 within an ulp (missing {missing[:3]}, different {wrong[:3]}, extra {len(got) - len(want)})")
    check({"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_ms", "val_loss", "val_loss/a", "samples/a"} <= tags,
          "the tags include loss, lr, grad norm, tokens/s, MFU, step time, val loss per source, blend counts")
    check({"pp_compute_ms/stage0", "pp_compute_ms/stage1", "pp_wait_ms/stage1"} <= tags,
          "the per-stage lists are one tag per stage (pp_compute_ms/stage0, ...)")
    if failures:
        sys.exit(1)


main()
