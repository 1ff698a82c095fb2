"""Token files other trainers write, through the real binary: Megatron-LM
indexed datasets and llm.c's Llama-3 (version 7) shards made by a small
writer here that follows the layout in ../shared/FORMATS.md (not the
trainer's writer), read back with `trainer data inspect`; the four index
defects each stop with exit 3 and the byte offset; the trainer's own
Megatron output parsed by a reader here; and short training runs on both.

usage: data_formats_check.py TRAINER MPIEXEC
"""
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, check, failures, tiny_recipe  # noqa: E402

DTYPES = {8: "H", 4: "i", 1: "B", 3: "h"}  # Megatron dtype code -> struct letter


def write_megatron(prefix, docs, code):
    """docs: list of token lists (one sequence per document)."""
    letter = DTYPES[code]
    size = struct.calcsize(letter)
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(struct.pack(f"<{len(d)}{letter}", *d))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(docs), len(docs) + 1))
        f.write(struct.pack(f"<{len(docs)}i", *[len(d) for d in docs]))
        ptrs, at = [], 0
        for d in docs:
            ptrs.append(at)
            at += len(d) * size
        f.write(struct.pack(f"<{len(docs)}q", *ptrs))
        f.write(struct.pack(f"<{len(docs) + 1}q", *range(len(docs) + 1)))


def read_megatron(prefix):
    """(tokens, documents) from an indexed dataset, by the layout alone."""
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    version, code, s, d = struct.unpack("<QBQQ", idx[9:34])
    lens = struct.unpack(f"<{s}i", idx[34:34 + 4 * s])
    letter = DTYPES[code]
    data = open(prefix + ".bin", "rb").read()
    return list(struct.unpack(f"<{sum(lens)}{letter}", data)), d - 1


def write_llmc_v7(path, tokens):
    hdr = [20240801, 7, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr) + struct.pack(f"<{len(tokens)}I", *tokens))


def write_llmc_gpt2(path, tokens):
    """llm.c's GPT-2 shards (fineweb.py): magic 20240520, version 1, uint16."""
    hdr = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr) + struct.pack(f"<{len(tokens)}H", *tokens))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def inspect_tokens(trainer, path, n):
    code, out = run([trainer, "data", "inspect", path, "--head", str(n)])
    lines = out.strip().split("\n")
    return code, lines[0], [int(x) for x in lines[1].split()] if code == 0 and len(lines) > 1 else []


def train(trainer, mpiexec, tmp, name, train_list, vocab=256):
    recipe = os.path.join(tmp, name + ".toml")
    tiny_recipe(recipe, {"run.name": name, "run.dir": os.path.join(tmp, "runs", name), "model.vocab_size": vocab,
                         "data.train": train_list, "training.steps": 6, "training.log_every": 3,
                         "checkpoint.every": 0})
    return run([mpiexec, "-np", "1", trainer, "train", recipe])


def main():
    trainer, mpiexec = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="formats_")
    rng = random.Random(7)
    docs16 = [[rng.randrange(65000) for _ in range(rng.randrange(1, 300))] for _ in range(40)]
    docs32 = [[rng.randrange(128256) for _ in range(rng.randrange(1, 300))] for _ in range(40)]
    for code, docs in ((8, docs16), (4, docs32)):
        prefix = os.path.join(tmp, f"mg{code}")
        write_megatron(prefix, docs, code)
        flat = [t for d in docs for t in d]
        for name in (prefix, prefix + ".bin", prefix + ".idx"):
            rc, head, toks = inspect_tokens(trainer, name, len(flat))
            dtype = "megatron, " + {8: "uint16", 4: "int32"}[code] + ","
            check(rc == 0 and toks == flat and "40 documents" in head and dtype in head,
                  f"megatron dtype {code} named as {os.path.basename(name)}: {len(flat)} tokens read as written ({head})")
    v7 = os.path.join(tmp, "llama3_shard.bin")
    toks7 = [rng.randrange(128256) for _ in range(5000)]
    write_llmc_v7(v7, toks7)
    rc, head, toks = inspect_tokens(trainer, v7, len(toks7))
    check(rc == 0 and toks == toks7 and "llm.c v7" in head, f"llm.c version 7 (Llama-3) shard: read as written ({head})")
    v1 = os.path.join(tmp, "gpt2_shard.bin")
    toks1 = [50256] + [rng.randrange(50257) for _ in range(5000)]
    write_llmc_gpt2(v1, toks1)
    rc, head, toks = inspect_tokens(trainer, v1, len(toks1))
    check(rc == 0 and toks == toks1 and "llm.c v1" in head, f"llm.c GPT-2 (version 1) shard: read as written ({head})")

    # Defects: each exit 3 with the byte offset.
    good = os.path.join(tmp, "mg8")
    idx = open(good + ".idx", "rb").read()

    def defect(name, idx_bytes, bin_bytes=None, want=""):
        p = os.path.join(tmp, name)
        open(p + ".idx", "wb").write(idx_bytes)
        open(p + ".bin", "wb").write(bin_bytes if bin_bytes is not None else open(good + ".bin", "rb").read())
        rc, out = run([trainer, "data", "inspect", p])
        check(rc == 3 and "byte offset" in out and want in out, f"{name}: exit {rc}: {out.strip()}")

    defect("truncated_idx", idx[:len(idx) - 20], want="truncated")
    defect("wrong_magic", b"MMIDIDY\x00\x00" + idx[9:], want="magic")
    defect("past_bin", idx, open(good + ".bin", "rb").read()[:-10], want="past its end")
    defect("float_dtype", idx[:17] + bytes([6]) + idx[18:], want="dtype code 6")
    huge = 2 ** 62  # sequences: the need must be reported as read, not wrapped around 2^64
    defect("huge_count", idx[:18] + struct.pack("<Q", huge) + idx[26:], want=f"{huge} sequences")
    defect("huge_count_need", idx[:18] + struct.pack("<Q", huge) + idx[26:], want=f"need {12 * huge + 34 + 8 * struct.unpack('<Q', idx[26:34])[0]}")
    rc, out = train(trainer, mpiexec, tmp, "bad_train", [os.path.join(tmp, "wrong_magic")])
    check(rc == 3 and "byte offset" in out, "a defective index in data.train: the run stops with exit 3")

    # The trainer's Megatron output, read by the reader above.
    text_dir = os.path.join(tmp, "text")
    os.makedirs(text_dir)
    for i in range(5):
        open(os.path.join(text_dir, f"doc{i}.txt"), "w").write(f"document {i}\n" * (50 + 30 * i))
    outs = {}
    for fmt in ("llmc", "megatron"):
        out_dir = os.path.join(tmp, "prep_" + fmt)
        rc, out = run([trainer, "data", "prepare", "--input", text_dir, "--output", out_dir, "--output-format", fmt,
                       "--val-fraction", "0.2", "--shard-tokens", "1000"])
        check(rc == 0, f"data prepare --output-format {fmt}: {out.strip().splitlines()[0] if out else ''}")
        outs[fmt] = out_dir
    mg_tokens, docs = [], 0
    for n in sorted(os.listdir(outs["megatron"])):
        if n.endswith(".idx"):
            t, d = read_megatron(os.path.join(outs["megatron"], n[:-4]))
            mg_tokens += t
            docs += d
    text = b"".join(open(os.path.join(text_dir, f"doc{i}.txt"), "rb").read() + b"\n" for i in range(5))
    check(mg_tokens == list(text), f"megatron output: {len(mg_tokens)} tokens are the bytes of the 5 documents")
    check(docs >= 5, f"megatron output: document index holds the documents (and their cut pieces): {docs}")

    # Training on both formats.
    rc, out = train(trainer, mpiexec, tmp, "on_megatron", [f"{outs['megatron']}/train_*.idx"])
    check(rc == 0 and "done: 6 steps" in out, "training on Megatron files (prefixes from a glob of .idx)")
    small_v7 = os.path.join(tmp, "small_v7.bin")
    write_llmc_v7(small_v7, [rng.randrange(256) for _ in range(3000)])
    rc, out = train(trainer, mpiexec, tmp, "on_v7", [small_v7])
    check(rc == 0 and "done: 6 steps" in out, "training on an llm.c version 7 shard")
    gpt2_text(trainer, mpiexec, tmp)
    if failures:
        sys.exit(1)


def gpt2_text(trainer, mpiexec, tmp):
    """configs/gpt2_text_small.toml on GPT-2-tokenized licences; a model too small for the vocabulary."""
    ranks = os.path.join(ROOT, "third_party", "tokenizers", "gpt2.tiktoken")
    if not check(os.path.exists(ranks), "gpt2.tiktoken is fetched (scripts/fetch_tokenizers.sh)"):
        return
    data = os.path.join(tmp, "licenses_gpt2")
    rc, out = run([trainer, "data", "prepare", "--tokenizer", "gpt2:" + ranks, "--input", "/usr/share/common-licenses",
                   "--output", data])
    check(rc == 0 and "50304" in out, "data prepare --tokenizer gpt2 suggests model.vocab_size 50304")
    recipe = os.path.join(ROOT, "configs", "gpt2_text_small.toml")
    sets = ["--set", f'data.train=["{data}/train_*.bin"]', "--set", f'data.val=["{data}/val_*.bin"]',
            "--set", f'run.dir="{os.path.join(tmp, "runs", "gpt2_text")}"']
    rc, out = run([mpiexec, "-np", "2", trainer, "train", recipe, *sets])
    val = [float(l.split("val loss")[1].split()[0]) for l in out.splitlines() if l.startswith("step") and "val loss" in l]
    check(rc == 0 and "done: 30 steps" in out and len(val) >= 2 and val[-1] < val[0],
          f"configs/gpt2_text_small.toml trains on GPT-2 tokens of real text (val loss {val})")
    rc, out = run([mpiexec, "-np", "1", trainer, "train", recipe, *sets, "--set", "model.vocab_size=50000",
                   "--set", "training.steps=1"])
    check(rc == 2 and "model.vocab_size >= 50257" in out, "model.vocab_size below the tokenizer's: exit 2, how to pad")


main()
