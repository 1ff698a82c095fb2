"""Tokenizer throughput: `trainer data prepare` against PyPI tiktoken's
encode_ordinary_batch on the same documents, same threads, same run.

The corpus is text found on any Debian machine: Python's standard library
sources and the decompressed Debian changelogs (English prose, code and
version strings; no repeated file), written once as JSONL, one document a
file. tiktoken is timed on encode alone (documents already in memory); the
trainer's time is its whole `data prepare`: reading and parsing the JSONL,
tokenizing, and writing the shards. Token counts are compared too.

usage: third_party/pyref/bin/python scripts/bench_tokenizer.py TRAINER [MB] [THREADS]
"""
import glob
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import tiktoken
from tiktoken.load import load_tiktoken_bpe

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
LLAMA3_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def corpus(limit_bytes):
    docs, total = [], 0
    files = sorted(glob.glob("/usr/lib/python3.11/**/*.py", recursive=True)) + \
        sorted(glob.glob("/usr/share/doc/*/changelog*.gz"))
    for f in files:
        try:
            raw = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        docs.append(text)
        total += len(raw)
        if total >= limit_bytes:
            break
    return docs, total


def main():
    trainer = sys.argv[1]
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 40
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else os.cpu_count()
    docs, nbytes = corpus(mb * 1e6)
    tmp = tempfile.mkdtemp(prefix="tokbench_")
    jsonl = os.path.join(tmp, "corpus.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    print(f"corpus: {len(docs)} documents, {nbytes / 1e6:.1f} MB of text; {threads} threads; {os.cpu_count()} cores")
    families = [("gpt2", GPT2_PAT, {"<|endoftext|>": 50256}, [50256]), ("llama3", LLAMA3_PAT, {}, [128000])]
    for name, pat, specials, start in families:
        ranks_file = os.path.join(ROOT, "third_party", "tokenizers", name + ".tiktoken")
        if not os.path.exists(ranks_file):
            print(f"{name}: {ranks_file} missing (scripts/fetch_tokenizers.sh)")
            continue
        enc = tiktoken.Encoding(name, pat_str=pat, mergeable_ranks=load_tiktoken_bpe(ranks_file),
                                special_tokens=specials)
        enc.encode_ordinary_batch(docs[:200], num_threads=threads)  # warm up the thread pool
        t0 = time.perf_counter()
        ids = enc.encode_ordinary_batch(docs, num_threads=threads)
        t_ref = time.perf_counter() - t0
        want = sum(len(x) for x in ids) + len(docs) * len(start)
        out = os.path.join(tmp, name)
        t0 = time.perf_counter()
        p = subprocess.run([trainer, "data", "prepare", "--tokenizer", f"{name}:{ranks_file}", "--input", jsonl,
                            "--output", out, "--val-fraction", "0", "--threads", str(threads)],
                           capture_output=True, text=True)
        t_ours = time.perf_counter() - t0
        got = int(re.search(r"(\d+) train tokens", p.stdout).group(1)) if p.returncode == 0 else -1
        print(f"{name}: tiktoken {nbytes / 1e6 / t_ref:.2f} MB/s ({t_ref:.2f} s, encode only) | "
              f"trainer data prepare {nbytes / 1e6 / t_ours:.2f} MB/s ({t_ours:.2f} s, read + tokenize + write) | "
              f"ratio {t_ref / t_ours:.2f}x | tokens {'equal' if got == want else f'DIFFER {got} vs {want}'} ({want})")


main()
