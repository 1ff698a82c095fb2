"""Helpers shared by the end-to-end checks that drive the real binary."""
import contextlib
import glob
import json
import os
import sys

failures = []

# tiktoken's GPT-2 pre-tokenizer pattern (tiktoken_ext/openai_public.py) and
# Llama-3's (llama_models/llama3/tokenizer.py).
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
LLAMA3_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
              r"""\s*[\r\n]+|\s+(?!\S)|\s+""")

# The repository root: every check finds configs/, scripts/, third_party/ and
# tests/reference/ from here, and nowhere else.
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
THIRD_PARTY = os.path.join(ROOT, "third_party")
REFERENCE = os.path.join(ROOT, "tests", "reference")  # the independent PyTorch model


def under_venv(venv_name, modules):
    """Imports the reference packages PyPI provides (scripts/setup.sh test puts
    them in the venv third_party/VENV_NAME); re-runs this script under that
    venv when this python lacks them. Returns the modules."""
    import importlib
    import sys
    python = os.path.join(THIRD_PARTY, venv_name, "bin", "python")
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError:
        venv = os.path.realpath(os.path.join(THIRD_PARTY, venv_name))
        if os.path.exists(python) and os.path.realpath(sys.prefix) != venv:
            os.execv(python, [python] + (["-B"] if sys.flags.dont_write_bytecode else []) + sys.argv)
        print(f"FAIL the reference packages ({', '.join(modules)}) are missing from third_party/{venv_name}: "
              "run scripts/setup.sh test")
        sys.exit(1)


def reference_encoders():
    """name -> text -> ids as the reference packages encode a document for
    each tokenizer with Hugging Face files (tiktoken for gpt2 and llama3,
    sentencepiece for Llama 2's model), the document mark included where the
    tokenizer puts one (Llama-3's <|begin_of_text|>, the model's bos)."""
    import sentencepiece
    import tiktoken
    import tiktoken.load
    tok_dir = os.path.join(THIRD_PARTY, "tokenizers")
    gpt2 = tiktoken.Encoding("gpt2", pat_str=GPT2_PAT, special_tokens={"<|endoftext|>": 50256},
                             mergeable_ranks=tiktoken.load.load_tiktoken_bpe(os.path.join(tok_dir, "gpt2.tiktoken")))
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(tok_dir, "llama2_sp.model"))
    l3_ranks = tiktoken.load.load_tiktoken_bpe(os.path.join(tok_dir, "llama3.tiktoken"))
    llama3 = tiktoken.Encoding("llama3", pat_str=LLAMA3_PAT, special_tokens={"<|begin_of_text|>": len(l3_ranks)},
                               mergeable_ranks=l3_ranks)
    return {"gpt2": gpt2.encode_ordinary, "sentencepiece": lambda t: [sp.bos_id()] + sp.encode(t),
            "llama3": lambda t: [128000] + llama3.encode_ordinary(t)}


def under_pyref(modules):
    """under_venv of third_party/pyref: Debian's torch 1.13 with tiktoken, sentencepiece, transformers 4."""
    return under_venv("pyref", modules)


def check(ok, msg):
    print(("ok   " if ok else "FAIL ") + msg, flush=True)
    if not ok:
        failures.append(msg)
    return ok


def finish(what):
    """Exits 1 when a check failed, else says all of `what` passed."""
    import sys
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print(f"all {what} checks passed")


def losses(run):
    """step -> loss from a run's metrics.jsonl (the last record of a step wins)."""
    return {r["step"]: r["loss"] for r in map(json.loads, open(os.path.join(run, "metrics.jsonl")))}


def step_reached(run_dir, step):
    """Whether a run's metrics.jsonl has logged `step` or a later one (a line being written is skipped)."""
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(metrics):
        return False
    for line in open(metrics):
        try:
            if json.loads(line)["step"] >= step:
                return True
        except (ValueError, KeyError):
            pass
    return False


def tensors(step_dir):
    """(file, dataset) -> array for every dataset of a checkpoint step directory."""
    import h5py
    out = {}
    for f in sorted(glob.glob(os.path.join(step_dir, "*.h5"))):
        with h5py.File(f, "r") as h:
            h.visititems(lambda n, d: out.__setitem__((os.path.basename(f), n), d[()])
                         if isinstance(d, h5py.Dataset) else None)
    return out


def same_tensors(a, b):
    import numpy as np
    return len(a) > 0 and a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def run(cmd, ok_codes=(0,), env=None):
    """Runs cmd; an exit code outside ok_codes prints its output and stops the
    check. Returns (exit code, stdout + stderr)."""
    import subprocess
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode not in ok_codes:
        print(p.stdout, p.stderr)
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return p.returncode, p.stdout + p.stderr


def torch_val_loss(export_h5, cfg, val_file, windows):
    """The mean loss, in float64, of tests/reference/torch_model.py (a GPT-2
    model of shape `cfg`) with the weights of a Hugging Face-named export
    (`trainer ckpt export`), over the first `windows` windows of seq_len + 1
    tokens of an llm.c uint16 token file: the windows an evaluation with
    dp x micro_batch x eval_batches = windows reads."""
    import sys
    import h5py
    import numpy as np
    import torch
    sys.path.insert(0, REFERENCE)
    import torch_model
    h = h5py.File(export_h5, "r")
    t = lambda n: torch.tensor(h[n][()], dtype=torch.float64)
    P = {"embed.tok": t("transformer.wte.weight"), "embed.pos": t("transformer.wpe.weight"),
         "final_norm.weight": t("transformer.ln_f.weight"), "final_norm.bias": t("transformer.ln_f.bias")}
    for l in range(cfg["n_layers"]):
        p, hf = f"layers.{l}.", f"transformer.h.{l}."
        P[p + "attn_norm.weight"], P[p + "attn_norm.bias"] = t(hf + "ln_1.weight"), t(hf + "ln_1.bias")
        q, k, v = t(hf + "attn.c_attn.weight").T.chunk(3, dim=0)  # Conv1D [in, out] -> Linear [out, in]
        P[p + "attn.wq"], P[p + "attn.wk"], P[p + "attn.wv"] = q, k, v
        P[p + "attn.bq"], P[p + "attn.bk"], P[p + "attn.bv"] = t(hf + "attn.c_attn.bias").chunk(3)
        P[p + "attn.wo"], P[p + "attn.bo"] = t(hf + "attn.c_proj.weight").T, t(hf + "attn.c_proj.bias")
        P[p + "mlp_norm.weight"], P[p + "mlp_norm.bias"] = t(hf + "ln_2.weight"), t(hf + "ln_2.bias")
        P[p + "mlp.w_fc"], P[p + "mlp.b_fc"] = t(hf + "mlp.c_fc.weight").T, t(hf + "mlp.c_fc.bias")
        P[p + "mlp.w_proj"], P[p + "mlp.b_proj"] = t(hf + "mlp.c_proj.weight").T, t(hf + "mlp.c_proj.bias")
    T = cfg["seq_len"]
    tokens = np.fromfile(val_file, dtype=np.uint16, offset=1024).astype(np.int64)
    x = torch.tensor(np.stack([tokens[k * T:k * T + T + 1] for k in range(windows)]))
    with torch.no_grad():
        return torch_model.loss_fn(cfg, P, x[:, :-1], x[:, 1:]).item()


DEMO_RECIPE = os.path.join(ROOT, "configs", "demo.toml")
FAKE_CLUSTER = os.path.join(ROOT, "scripts", "fake_cluster.sh")


def fake_cluster(*args, env=None):
    """scripts/fake_cluster.sh ARGS; the finished process (returncode, stdout, stderr)."""
    import subprocess
    return subprocess.run([FAKE_CLUSTER, *args], capture_output=True, text=True, env=env)


def cluster_up(n, what, slurm=False):
    """`fake_cluster.sh up N [--slurm]`: the environment its exports make (this
    one's plus them). Where it cannot be made: exits 77 (skipped), or with
    slurm returns None (the check's other parts have run). Ends the check
    `what` when `up` fails."""
    p = fake_cluster("up", str(n), *(["--slurm"] if slurm else []))
    if p.returncode == 77:
        print(f"SKIP{' the Slurm part' if slurm else ''}: {p.stderr.strip()}")
        if slurm:
            return None
        sys.exit(77)
    check(p.returncode == 0, f"up {n}: exit {p.returncode} {p.stderr.strip()[-300:]}")
    if p.returncode != 0:
        finish(what)
    return dict(os.environ, **cluster_exports(p.stdout))


@contextlib.contextmanager
def fake_hosts(n, what, slurm=False):
    """cluster_up(n, what, slurm) around the body of a `with`: yields (the
    environment, the host names), or (None, []) where the Slurm cluster cannot
    be made; the hosts go down on the way out, checked."""
    env = cluster_up(n, what, slurm)
    if env is None:
        yield None, []
        return
    try:
        yield env, fake_cluster("hosts", env=env).stdout.split()
    finally:
        down = fake_cluster("down", env=env)
        check(down.returncode == 0,
              f"down{' (Slurm)' if slurm else ''}: exit {down.returncode} {down.stderr.strip()[-300:]}")


def cluster_exports(text):
    """The variables fake_cluster.sh's `up` prints as export lines."""
    env = {}
    for line in text.splitlines():
        if line.startswith("export "):
            for kv in line[len("export "):].split():
                k, v = kv.split("=", 1)
                env[k] = v
    return env


def small_demo(trainer, tmp, steps):
    """Prepares the demo's byte-level data under tmp and returns (data dir, --set
    arguments for a short configs/demo.toml run: 4 layers, no validation, every
    step logged, 2 warm-up steps)."""
    import subprocess
    data = os.path.join(tmp, "data")
    subprocess.run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses",
                    "--output", data], check=True, stdout=subprocess.DEVNULL)
    return data, ["--set", f'data.train=["{data}/train_*.bin"]', "--set", "data.val=[]",
                  "--set", f"training.steps={steps}", "--set", "training.log_every=1",
                  "--set", "optimizer.warmup_steps=2", "--set", "training.eval_every=0",
                  "--set", "model.n_layers=4"]


def tiny_recipe(path, changes=None):
    """Writes tests/e2e/recipes/tiny.toml to path with changes ("section.key" ->
    str, bool, int, float, list or dict; new sections go last); returns path."""
    import tomllib
    with open(os.path.join(ROOT, "tests", "e2e", "recipes", "tiny.toml"), "rb") as f:
        recipe = tomllib.load(f)
    for name, value in (changes or {}).items():
        section, key = name.split(".", 1)
        recipe.setdefault(section, {})[key] = value

    def toml(v):  # dicts (blend sources, rope_scaling) as inline tables
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)  # Python's inf and nan are TOML's too
        if isinstance(v, str):  # JSON's escapes are TOML's; DEL is the control character JSON leaves bare
            return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
        if isinstance(v, list):
            return "[" + ", ".join(toml(x) for x in v) + "]"
        return "{ " + ", ".join(f"{k} = {toml(x)}" for k, x in v.items()) + " }"
    text = "".join(f"[{s}]\n" + "".join(f"{k} = {toml(v)}\n" for k, v in keys.items()) for s, keys in recipe.items())
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def run_bounded(cmd, env=None, timeout=300):
    """(exit code, stdout and stderr together); a command still running after
    `timeout` s is killed with its whole process group (mpirun's ranks too)
    and reported as hung: code None."""
    import signal
    import subprocess
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out + f"\n(hung: killed after {timeout} s)"


class TinyRuns:
    """A temporary directory with the licence texts prepared as data, and tiny
    recipes (tiny_recipe) that train on it: `defaults` and then the caller's
    changes over tests/e2e/recipes/tiny.toml."""
    defaults = {}

    def __init__(self, trainer, mpiexec, tmp):
        self.trainer, self.mpiexec, self.tmp = trainer, mpiexec, tmp
        self.data = os.path.join(tmp, "data")
        code, out = run_bounded([trainer, "data", "prepare", "--input", "/usr/share/common-licenses",
                                 "--output", self.data])
        if code != 0:
            raise SystemExit(f"data prepare failed ({code}):\n{out}")

    def sh(self, cmd, env=None, timeout=300):
        return run_bounded(cmd, env, timeout)

    def recipe(self, name, run=None, **changes):
        return tiny_recipe(os.path.join(self.tmp, name + ".toml"), {
            "run.dir": run or os.path.join(self.tmp, name), "data.train": [f"{self.data}/train_*.bin"],
            **self.defaults, **changes})


# What every Slurm test's slurm.conf says: root runs the daemons, no cgroups,
# no accounting, PMIx for Open MPI.
SLURM_COMMON = """SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
JobRequeue=1
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldPort=16817
SlurmdPort=16818
"""


def start_munge():
    """munged, unless one runs already (another test may start it at the same moment)."""
    import shutil
    import subprocess
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
        return
    os.makedirs("/run/munge", exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    if not os.path.exists("/etc/munge/munge.key"):
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/mungekey", "--create"], check=True)
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"])
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
        raise SystemExit("munged did not start")
