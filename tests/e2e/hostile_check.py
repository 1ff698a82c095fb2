"""Hostile input and faults, third pass (issue 66; docs/RELIABILITY.md),
through the real binary: a set-up failure on some ranks only, at every
step of set-up; a run inside another run's checkpoint step; skipping
updates that cannot recover; layout products past 32 bits; command-line
numbers that wrap. Each case tries the class, not one example.

usage: hostile_check.py TRAINER MPIEXEC [CASE ...]
"""
import glob
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TinyRuns, check, failures  # noqa: E402

# The steps of set-up, in order (recipe/fault.h kSetupSteps).
SETUP_STEPS = ["run_dirs", "memory", "data", "backend", "grid", "model", "weights", "peak", "disk", "metrics",
               "health"]


class Env(TinyRuns):
    defaults = {"training.steps": 10, "training.log_every": 5}


def last_line(out):
    """The line that says what happened: the first error, else the last line
    that is not mpirun's own frame."""
    lines = [x for x in out.strip().splitlines() if x.strip() and not x.startswith("---")]
    errors = [x for x in lines if x.startswith(("error:", "stopped:"))]
    return errors[0] if errors else lines[-1] if lines else ""


def case_setup_failures(e):
    """A rank that fails at any step of set-up while the others go on: every
    rank exits 2 with that rank's message, in seconds (the others waited in
    a collective it never entered: a hang until killed)."""
    b = e.recipe("setup", **{"parallel.pp": 2, "health.check": True, "checkpoint.every": 5})
    for i, step in enumerate(SETUP_STEPS):
        rank = i % 2
        env = dict(os.environ, TRAINER_FAULT=f"setup_fail rank={rank} point={step}")
        t0 = time.time()
        code, out = e.sh([e.mpiexec, "-np", "2", e.trainer, "train", b], env=env, timeout=90)
        took = time.time() - t0
        check(code == 2 and f"rank {rank} fails set-up step {step}" in out,
              f"set-up step {step} failing on rank {rank} only: exit 2 with its message in {took:.1f} s "
              f"(got {code}: {last_line(out)})")
    # A real one: a node whose CPU lacks the recipe's kernel set (capped by
    # TRAINER_CPU_KERNELS on rank 1 only).
    run = [e.trainer, "train", b, "--set", 'runtime.cpu_kernels="avx2"']
    bare = {k: v for k, v in os.environ.items() if k != "TRAINER_CPU_KERNELS"}
    code, out = e.sh([e.mpiexec, "-np", "1", *run, ":", "-np", "1", "-x", "TRAINER_CPU_KERNELS=generic", *run],
                     env=bare, timeout=90)
    check(code == 2 and "TRAINER_CPU_KERNELS" in out,
          f"rank 1's CPU lacks runtime.cpu_kernels = avx2: exit 2 naming the cap (got {code}: {last_line(out)})")
    # trainer health: the same, and a recipe error said once, not once per rank.
    health = [e.trainer, "health", b, "--set", 'runtime.cpu_kernels="avx2"']
    code, out = e.sh([e.mpiexec, "-np", "1", *health, ":", "-np", "1", "-x", "TRAINER_CPU_KERNELS=generic", *health],
                     env=bare, timeout=90)
    check(code == 2 and "TRAINER_CPU_KERNELS" in out and out.count("error:") == 1,
          f"trainer health, rank 1's CPU lacking avx2: exit 2, one message (got {code}, "
          f"{out.count('error:')} error lines)")
    code, out = e.sh([e.mpiexec, "-np", "2", e.trainer, "health", b, "--set", "model.d_model=-1"], timeout=90)
    check(code == 2 and out.count("error:") == 1 and "d_model" in out,
          f"trainer health with a recipe error on 2 ranks: exit 2, said once (got {code}, {out.count('error:')} times)")


def case_run_inside_a_step(e):
    """Every directory a run writes, inside another run's committed step (or
    that step itself, or a link to it): refused before anything is written.
    A user's own directory named step_1 elsewhere is fine."""
    a = e.recipe("owner", **{"checkpoint.every": 5, "checkpoint.keep": 1})
    code, out = e.sh([e.trainer, "train", a])
    step = os.path.join(e.tmp, "owner", "checkpoints", "step_00000010")
    if not check(code == 0 and os.path.isdir(step), f"the owner run trains and commits step 10 (got {code})"):
        return
    before = sorted(os.listdir(step))
    link = os.path.join(e.tmp, "link_to_step")
    os.symlink(step, link)
    b = e.recipe("intruder", **{"checkpoint.every": 5})
    for key, value in [("run.dir", step), ("run.dir", step + "/sub"), ("run.dir", link + "/sub"),
                       ("checkpoint.dir", step + "/ck"), ("metrics.tensorboard_dir", step + "/tb")]:
        extra = ["--set", "metrics.tensorboard=true"] if key.startswith("metrics") else []
        for cmd in ("train", "supervise"):
            code, out = e.sh([e.trainer, cmd, b, "--set", f'{key}="{value}"', *extra])
            check(code == 2 and "checkpoint step" in out,
                  f"{cmd} with {key} = {os.path.relpath(value, e.tmp)}: exit 2 naming the step "
                  f"(got {code}: {last_line(out)})")
    check(sorted(os.listdir(step)) == before, "the owner's step directory is unchanged")
    # Smaller: a Hugging Face export onto a file says it is no directory.
    f = os.path.join(e.tmp, "a_file")
    open(f, "w").write("notes\n")
    code, out = e.sh([e.trainer, "ckpt", "export", step, "--format", "hf", "--output", f])
    check(code == 4 and "not a directory" in out and open(f).read() == "notes\n",
          f"ckpt export --format hf --output FILE: exit 4, 'not a directory', the file kept (got {code})")
    mine = os.path.join(e.tmp, "mine", "step_1")
    code, out = e.sh([e.trainer, "train", b, "--set", f'run.dir="{mine}"'])
    check(code == 0, f"a run.dir of the user's own named step_1 trains (got {code}: {last_line(out)})")


def case_renamed_mid_run(e):
    """A run whose directory (or its parent) is renamed while it trains,
    saving every step in the background: it stops (exit 2, the lock is gone)
    and nothing is made again under the old name."""
    for i, what in enumerate(["run", "parent", "run", "parent", "run"]):
        parent = os.path.join(e.tmp, f"moving_{i}")
        run = os.path.join(parent, "run")
        r = e.recipe(f"moving_{i}", **{"run.dir": run, "training.steps": 100000, "training.log_every": 1,
                                       "checkpoint.every": 1, "checkpoint.async": True, "checkpoint.keep": 2,
                                       "fault.inject": ["slow rank=0 ms=20"]})
        p = subprocess.Popen([e.trainer, "train", r], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        end = time.time() + 60
        while time.time() < end and not glob.glob(os.path.join(run, "checkpoints", "step_00000003")):
            time.sleep(0.02)
        time.sleep(0.013 * i)  # somewhere else in the step each time
        moved = (run if what == "run" else parent) + ".moved"
        os.rename(run if what == "run" else parent, moved)
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        left = os.path.exists(run)
        if left:
            print("    made again:", sorted(os.path.relpath(os.path.join(d, f), run)
                                         for d, _, fs in os.walk(run) for f in fs + ["."]))
        check(p.returncode == 2 and not left and "lock" in out,
              f"{what} directory renamed mid-run (try {i + 1}): exit {p.returncode} (2), "
              f"{'the old path made again' if left else 'nothing under the old name'}")


def case_small_checkpoint_disk(e):
    """The health check's disk probe asks for what the checkpoints need, not
    a fixed 32 MB: a 16 MB file system takes a tiny model's. One every node
    shares that cannot take even that is the path's failure (exit 8 full, 2
    read-only), said once, never "unfit nodes" (exit 10), and supervise's
    check before a launch stops with 8 excluding no host. Root: a tmpfs."""
    if os.geteuid() != 0:
        print("note: not root: no tmpfs to mount; skipped")
        return
    mnt = os.path.join(e.tmp, "small_disk")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt]).returncode != 0:
        print("note: cannot mount a tmpfs here; skipped")
        return
    try:
        r = e.recipe("small_disk_run", **{"checkpoint.dir": os.path.join(mnt, "ck"), "checkpoint.every": 5})
        code, out = e.sh([e.mpiexec, "-np", "2", e.trainer, "health", r, "--set", "health.in_turn=true"])
        check(code == 0, f"trainer health with checkpoint.dir on a 16 MB disk, a tiny model: fit (got {code}: "
                         f"{last_line(out)[:200]})")
        # Full but for 300 KB: room for the lock files, not for a checkpoint of 1 MB or more.
        filler = os.path.join(mnt, "filler")
        st = os.statvfs(mnt)
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1K", f"count={st.f_bavail * st.f_frsize // 1024 - 300}"],
                       capture_output=True)
        code, out = e.sh([e.mpiexec, "-np", "2", e.trainer, "health", r])
        check(code == 8 and out.count("cannot take a") == 1 and mnt in out,
              f"health with checkpoint.dir on a full disk: exit 8 naming the path once, no unfit node "
              f"(got {code}: {last_line(out)[:200]})")
        # train stops sooner (its lock in the full directory), naming the path, no node blamed
        code, out = e.sh([e.mpiexec, "-np", "2", e.trainer, "train", r, "--set", "health.check=true"])
        check(code in (2, 8) and mnt in out and "unfit" not in out,
              f"train with health.check and checkpoint.dir on a full disk: exit {code}, the path named, no unfit "
              f"node ({last_line(out)[:200]})")
        # supervise's check before each launch: the path's failure, exit 8, no host excluded.
        code, out = e.sh([e.trainer, "supervise", r, "--set", "health.check=true", "--set", "launch.ranks=2",
                          "--set", f'launch.hosts=["{socket.gethostname()}"]'])
        events = [json.loads(x)["event"] for x in open(os.path.join(e.tmp, "small_disk_run", "events.jsonl"))]
        check(code == 8 and "disk_full" in events and "replace" not in events and "unfit_node" not in events,
              f"supervise with health.check and checkpoint.dir on a full disk: exit 8, a disk_full event, no host "
              f"excluded (got {code}, events {events})")
        os.remove(filler)
        subprocess.run(["mount", "-o", "remount,ro", mnt])
        code, out = e.sh([e.mpiexec, "-np", "2", e.trainer, "health", r])
        check(code == 2 and "cannot take a" in out, f"health with checkpoint.dir read-only: exit 2 naming the path "
                                                   f"(got {code}: {last_line(out)[:200]})")
    finally:
        subprocess.run(["umount", "-l", mnt])


def case_skip_cannot_recover(e):
    """on_nan = "skip" where the weights stay finite but every forward
    overflows (a learning rate of 1e20): exit 6, and no checkpoint of a step
    whose loss is not finite; the one whose update overflowed (its own loss
    finite) is set aside when the batches after it all fail. A save due at
    such a step falls to the next step whose loss is (a NaN in the gradients
    alone, the loss finite, leaves the weights intact: saved as due)."""
    for policy in ("skip", "rollback"):
        r = e.recipe(f"blowup_{policy}", **{"checkpoint.every": 1, "training.log_every": 1})
        code, out = e.sh([e.trainer, "train", r, "--set", "optimizer.lr=1e20",
                          "--set", f'training.on_nan="{policy}"', "--set", "optimizer.warmup_steps=0"])
        check(code == 6, f"lr 1e20 with on_nan = {policy}: exit 6 (got {code}: {last_line(out)})")
        check("final loss" not in out or "nan" not in out.split("final loss")[-1].split("\n")[0],
              f"on_nan = {policy}: no 'final loss nan'")
        losses = {}
        for line in open(os.path.join(e.tmp, f"blowup_{policy}", "metrics.jsonl")):
            rec = json.loads(line)
            if "loss" in rec and "step" in rec and isinstance(rec["loss"], (int, float)):
                losses[rec["step"]] = rec["loss"]
        steps = [int(os.path.basename(p)[5:]) for p in
                 glob.glob(os.path.join(e.tmp, f"blowup_{policy}", "checkpoints", "step_*")) if "." not in p]
        bad = [s for s in steps if s in losses and not math.isfinite(losses[s])]
        check(not bad, f"on_nan = {policy}: no committed checkpoint at a step whose loss was not finite "
                       f"(committed {sorted(steps)}, bad {bad})")
        # Nor one whose update overflowed (its own loss finite, every loss after it not): step 1's,
        # which every rollback, and every batch skipped, met at once. Set aside, kept, `latest` moved off it.
        ck = os.path.join(e.tmp, f"blowup_{policy}", "checkpoints")
        aside = glob.glob(os.path.join(ck, "step_00000001.unusable_*"))
        latest = open(os.path.join(ck, "latest")).read().strip() if os.path.exists(os.path.join(ck, "latest")) else ""
        check(not steps and len(aside) == 1 and "set aside" in out and latest == "",
              f"on_nan = {policy}: step 1, whose update overflowed, set aside as {[os.path.basename(a) for a in aside]} "
              f"(committed left {sorted(steps)}, latest {latest!r})")
    r = e.recipe("one_bad", **{"checkpoint.every": 5, "checkpoint.keep": 0})
    code, out = e.sh([e.trainer, "train", r, "--set", 'training.on_nan="skip"',
                      "--set", 'fault.inject=["nan step=5"]'])
    steps = sorted(os.path.basename(p) for p in glob.glob(os.path.join(e.tmp, "one_bad", "checkpoints", "step_*")))
    # The NaN is in the gradients only: step 5's loss is finite and its update skipped, so the weights
    # saved are step 4's, intact: the save stays at step 5.
    check(code == 0 and steps == ["step_00000005", "step_00000010"],
          f"a NaN gradient at save step 5 under skip: saved at step 5 as due (got {code}, {steps})")


def case_tokenizer_recorded(e):
    """The run's tokenizer is what every source's data_info.json names, and
    the checkpoint keeps it: sources made by different tokenizers (train
    and val, blend members) are refused naming both; export and resume go by
    the recorded one, not by whatever data_info.json says later."""
    other = os.path.join(e.tmp, "other_tok")
    os.makedirs(other, exist_ok=True)
    for f in glob.glob(os.path.join(e.data, "*.bin")):
        os.link(f, os.path.join(other, os.path.basename(f)))
    with open(os.path.join(other, "data_info.json"), "w") as f:
        json.dump({"tokenizer": "other", "tokenizer_spec": "other.json", "vocab_size": 256}, f)
    mine = f"{e.data}/train_*.bin"
    theirs = f"{other}/train_*.bin"
    for label, sets in [("val from another tokenizer", [f'data.val=["{theirs}"]']),
                        ("a blend member from another tokenizer",
                         [f'data.train=[{{path="{mine}", weight=0.5, name="a"}}, '
                          f'{{path="{theirs}", weight=0.5, name="b"}}]'])]:
        r = e.recipe("mixed")
        code, out = e.sh([e.trainer, "train", r, *[a for s in sets for a in ("--set", s)]])
        check(code == 3 and "other" in out and "bytes" in out,
              f"{label}: exit 3 naming both tokenizers (got {code}: {last_line(out)[:200]})")
    r = e.recipe("recorded", **{"checkpoint.every": 5})
    code, out = e.sh([e.trainer, "train", r, "--set", "training.steps=5"])
    step = os.path.join(e.tmp, "recorded", "checkpoints", "step_00000005")
    text = open(os.path.join(step, "recipe.toml")).read() if os.path.isdir(step) else ""
    check(code == 0 and 'tokenizer = "bytes"' in text, f"the checkpoint's recipe records tokenizer = \"bytes\" "
                                                       f"(got {code})")
    # The data is re-prepared (here: its data_info.json rewritten) with another tokenizer.
    info = os.path.join(e.data, "data_info.json")
    kept = open(info).read()
    with open(info, "w") as f:
        json.dump({"tokenizer": "other", "tokenizer_spec": "other.json", "vocab_size": 256}, f)
    try:
        code, out = e.sh([e.trainer, "ckpt", "export", step, "--format", "hf", "--output",
                          os.path.join(e.tmp, "recorded_hf")])
        check(code == 0 and "other" not in out, f"export goes by the recorded tokenizer (got {code}: "
                                                f"{last_line(out)[:200]})")
        code, out = e.sh([e.trainer, "train", r, "--set", "training.steps=10"])
        check(code == 2 and "data.tokenizer" in out, f"resuming on data made by another tokenizer: exit 2 naming "
                                                     f"data.tokenizer (got {code}: {last_line(out)[:200]})")
    finally:
        with open(info, "w") as f:
            f.write(kept)


def case_layout_overflow(e):
    """Products of the parallel sizes past 32 bits (and past what a job may
    have): exit 2 naming the keys from train, plan and smoke, never SIGFPE or
    a negative rank count."""
    b = e.recipe("layout")
    cases = [(["parallel.tp=65536", "parallel.cp=65536"], "parallel"),
             (["parallel.cp=2147483647", "parallel.dp=2"], "parallel.cp"),
             (["parallel.tp=1024", "parallel.cp=1024", "parallel.pp=1024"], "ranks"),
             (["parallel.dp=65536", "parallel.tp=65536"], "ranks"),
             (["parallel.pp=2", "parallel.schedule=\"interleaved\"", "parallel.virtual_stages=1048576"], "parallel"),
             (["launch.ranks=4294967296"], "launch.ranks")]
    for sets, word in cases:
        args = [a for s in sets for a in ("--set", s)]
        for cmd in ([e.trainer, "train", b], [e.trainer, "plan", b, "--ranks", "4"], [e.trainer, "plan", b],
                    [e.trainer, "smoke", b]):
            code, out = e.sh(cmd + args, timeout=60)
            check(code == 2 and word in out,
                  f"{' '.join(os.path.basename(c) for c in cmd[:4])} {' '.join(sets)}: exit 2 naming {word} "
                  f"(got {code}: {last_line(out)[:160]})")


def case_command_line_numbers(e):
    """Every command-line number through one checked reader: out of range,
    wrapping, inf, nan, hex and trailing text refused with exit 2 naming the
    option."""
    b = e.recipe("numbers")
    t = e.trainer
    shard = sorted(glob.glob(os.path.join(e.data, "train_*.bin")))[0]
    e.sh([t, "train", e.recipe("numbers_ckpt", **{"checkpoint.every": 1}), "--set", "training.steps=1"])
    ckpt = os.path.join(e.tmp, "numbers_ckpt", "checkpoints")
    cases = [
        ([t, "plan", b, "--ranks", "4294967297"], "--ranks"),
        ([t, "plan", b, "--ranks", "-4"], "--ranks"),
        ([t, "plan", b, "--ranks-per-node", "4294967297"], "--ranks-per-node"),
        ([t, "plan", b, "--set", "launch.nodes=2", "--set", "launch.ranks=2", "--nodes", "4294967297"], "--nodes"),
        ([t, "plan", b, "--memory-per-rank-gb", "0"], "--memory-per-rank-gb"),
        ([t, "plan", b, "--memory-per-rank-gb", "inf"], "--memory-per-rank-gb"),
        ([t, "plan", b, "--memory-per-rank-gb", "1e300"], "--memory-per-rank-gb"),
        ([t, "plan", b, "--memory-per-rank-gb", "nan"], "--memory-per-rank-gb"),
        ([t, "plan", b, "--memory-per-rank-gb", "0x10"], "--memory-per-rank-gb"),
        ([t, "plan", b, "--ranks", "4", "--search", "--profile", "none.json", "--top", "99999999999999999999"],
         "--top"),
        ([t, "bench", b, "--steps", "4294967297"], "--steps"),
        ([t, "bench", b, "--steps", "3x"], "--steps"),
        ([t, "bench", b, "--warmup", "-1"], "--warmup"),
        ([t, "data", "prepare", "--input", "/usr/share/common-licenses/GPL-3", "--output",
          os.path.join(e.tmp, "p"), "--threads", "4294967297"], "--threads"),
        ([t, "data", "prepare", "--input", "/usr/share/common-licenses/GPL-3", "--output",
          os.path.join(e.tmp, "p"), "--doc-end", "99999999999"], "--doc-end"),
        ([t, "data", "prepare", "--input", "/usr/share/common-licenses/GPL-3", "--output",
          os.path.join(e.tmp, "p"), "--val-fraction", "inf"], "--val-fraction"),
        ([t, "data", "inspect", shard, "--head", "99999999999999999999"], "--head"),
        ([t, "ckpt", "export", ckpt, "--output", os.path.join(e.tmp, "x.h5"),
          "--shard-mb", "5x"], "--shard-mb"),
    ]
    for cmd, opt in cases:
        code, out = e.sh(cmd, timeout=60)
        check(code == 2 and opt in out, f"{' '.join(cmd[1:2] + cmd[-2:])}: exit 2 naming {opt} "
                                        f"(got {code}: {last_line(out)[:160]})")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fake_cluster.sh")
    for slots in ("abc", "0", "1x", "99999999999"):
        code, out = e.sh(["bash", script, "up", "2", "--slots", slots], timeout=60)
        check(code == 2 and "--slots" in out, f"fake_cluster.sh up 2 --slots {slots}: exit 2 naming --slots "
                                              f"(got {code}: {last_line(out)[:120]})")
    code, out = e.sh([t, "plan", b, "--memory-per-rank-gb", "2"])
    check(code == 0 and "--memory-per-rank-gb" in out, f"plan --memory-per-rank-gb 2 still works (got {code})")


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    only = sys.argv[3:]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TRAINER_CACHE_DIR"] = os.path.join(tmp, "cache")
        e = Env(trainer, mpiexec, tmp)
        for name, fn in list(globals().items()):
            if name.startswith("case_") and (not only or name[5:] in only):
                print(f"--- {name[5:]}", flush=True)
                t0 = time.time()
                fn(e)
                print(f"    ({time.time() - t0:.1f} s)", flush=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
