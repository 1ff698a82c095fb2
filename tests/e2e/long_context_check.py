#!/usr/bin/python3
"""configs/long_context.toml (issue 50) through the real binary: a small
Llama-shaped model reading 16384 tokens at a time.

- `mpirun -np 4 trainer train configs/long_context.toml` (cp 4, attention as
  a ring) on the demo's byte-level text: every step's loss finite, the last
  steps' below the first's; the time per step is printed (the README's
  figure);
- at cp 1 (one rank holding whole sequences, about 1.03 GB by `trainer
  plan`) inside a memory cgroup of 1 GB (a child of this process's cgroup,
  v2 or v1; skipped, with the reason, where none can be made), the
  pre-flight refuses the run before allocating (exit 2) and names
  parallel.cp = 2 (about 0.65 GB) among the ways out, saying it fits.

usage: long_context_check.py TRAINER MPIEXEC
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, check, finish, run  # noqa: E402

RECIPE = os.path.join(ROOT, "configs", "long_context.toml")
STEPS = 4  # of the recipe's 12: enough to see the loss fall
LIMIT_MB = 1024  # below cp 1's need for one rank, above cp 2's and what the process already holds


def memory_cgroup(name):
    """A child of this process's memory cgroup limited to LIMIT_MB: (its
    cgroup.procs path, its directory), or (None, why not)."""
    lines = open("/proc/self/cgroup").read().splitlines()
    v2 = [l[3:] for l in lines if l.startswith("0::")]
    v1 = [l.split(":", 2)[2] for l in lines if "memory" in l.split(":")[1].split(",")]
    tries = []
    if v2 and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        tries.append(("/sys/fs/cgroup" + v2[0].rstrip("/"), "memory.max"))
    if v1 and os.path.isdir("/sys/fs/cgroup/memory"):
        tries.append(("/sys/fs/cgroup/memory" + v1[0].rstrip("/"), "memory.limit_in_bytes"))
    why = "no memory cgroup hierarchy here"
    for parent, limit_file in tries:
        d = os.path.join(parent, name)
        try:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, limit_file), "w") as f:
                f.write(str(LIMIT_MB << 20))
            return os.path.join(d, "cgroup.procs"), d
        except OSError as e:
            why = f"cannot make a memory cgroup under {parent}: {e}"
            try:
                os.rmdir(d)
            except OSError:
                pass
    return None, why


def remove_cgroup(d):
    """Removes the test's cgroup: once the ranks have left it, or after
    moving what is left (a lingering daemon) to its parent."""
    for attempt in range(100):
        try:
            os.rmdir(d)
            return
        except OSError:
            if attempt == 50:
                left = open(os.path.join(d, "cgroup.procs")).read().split()
                print(f"note: moving {left} out of {d} to remove it")
                for pid in left:
                    try:
                        with open(os.path.join(os.path.dirname(d), "cgroup.procs"), "w") as f:
                            f.write(pid)
                    except OSError:
                        pass
            time.sleep(0.1)
    print(f"warning: could not remove {d}")


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses", "--output", data])
        sets = ["--set", f'data.train=["{data}/train_*.bin"]', "--set", f"training.steps={STEPS}"]

        # cp 4 trains; the loss falls.
        rdir = os.path.join(tmp, "run")
        t0 = time.time()
        code, out = run([mpiexec, "-np", "4", trainer, "train", RECIPE, *sets, "--set", f"run.dir={rdir}"])
        took = time.time() - t0
        rec = [json.loads(l) for l in open(os.path.join(rdir, "metrics.jsonl"))]
        loss = {r["step"]: r["loss"] for r in rec if "loss" in r}
        step_ms = [r["step_ms"] for r in rec if "step_ms" in r and r["step"] > 1]
        print(f"losses: {loss}")
        print(f"figure: mpirun -np 4 (cp 4), T = 16384: {STEPS} steps in {took:.0f} s "
              f"(step {sum(step_ms) / max(1, len(step_ms)) / 1e3:.1f} s after the first)")
        check(len(loss) == STEPS and all(v == v and abs(v) < 1e9 for v in loss.values()) and
              loss[STEPS] < loss[1] - 0.3,
              f"cp 4 trains {STEPS} steps at T = 16384, the loss falls ({loss.get(1)} -> {loss.get(STEPS)})")

        # cp 1 under a memory limit: refused before allocating, cp suggested.
        procs, d = memory_cgroup(f"trainer_long_context_{os.getpid()}")
        if procs is None:
            print(f"SKIP the memory part: {d}")
        else:
            try:
                inside = ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh"]
                code, out = run([*inside, mpiexec, "-np", "1", trainer, "train", RECIPE, *sets,
                                 "--set", "parallel.cp=1", "--set", f"run.dir={tmp}/cp1"], ok_codes=(0, 1, 2))
                said = [l for l in out.splitlines() if "Try:" in l or "needs" in l][:1]
                print("\n".join(said))
                fits = re.search(r"parallel\.cp = 2 \(each sequence cut over twice the ranks[^)]*\) \([0-9.]+ GB, fits\)",
                                 out)
                check(code == 2 and fits is not None and "step " not in out,
                      f"cp 1 under a {LIMIT_MB} MB limit: exit {code} before any step, parallel.cp = 2 named as a "
                      f"way out that fits")
            finally:
                remove_cgroup(d)
    finish("long-context")


if __name__ == "__main__":
    main()
