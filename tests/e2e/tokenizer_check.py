"""Token ids of `trainer data prepare` against the reference packages:
PyPI tiktoken (GPT-2 ranks, Llama-3 ranks) and PyPI sentencepiece (a
Llama-2 style model), on every file in /usr/share/common-licenses, on a
file rich in non-ASCII text, emoji and whitespace runs, on a file large
enough to be tokenized in pieces, and on the same text as gzip JSONL.
Runs under third_party/pyref (scripts/setup.sh test); tokenizer files come
from scripts/fetch_tokenizers.sh.

usage: tokenizer_check.py TRAINER
"""
import gzip
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import GPT2_PAT, LLAMA3_PAT, THIRD_PARTY, check, failures, under_pyref  # noqa: E402

TOK = os.path.join(THIRD_PARTY, "tokenizers")
LICENSES = "/usr/share/common-licenses"

sentencepiece, tiktoken, tiktoken_load = under_pyref(["sentencepiece", "tiktoken", "tiktoken.load"])
load_tiktoken_bpe = tiktoken_load.load_tiktoken_bpe


# Scripts, emoji (ZWJ sequences, skin tones, flags), combining marks, every
# Unicode space (U+0085, U+00A0, U+3000, ...), tabs, CRLF, runs of spaces
# and newlines, contractions in both cases, digits of every length.
UNICODE_TEXT = """Grüße aus Köln! Ça va? Ñandú, façade, naïve — “quotes” ‘single’ «guillemets»
Ελληνικά: Καλημέρα κόσμε. Русский: Съешь же ещё этих мягких французских булок.
日本語のテキスト、漢字とひらがな。中文：你好，世界！한국어: 안녕하세요 세계
العربية: مرحبا بالعالم. עברית: שלום עולם. हिन्दी: नमस्ते दुनिया। ไทย: สวัสดีชาวโลก
Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇩🇪🇯🇵 ❤️‍🔥 🧑🏿‍💻 1️⃣ ©®™ ∑∫√∞ ≠ ≤ ≥ → ⇒ ♠♣♥♦
Combining: e\u0301 a\u0308 n\u0303 Z\u0335\u0321a\u0337l\u0338g\u0336o
Spaces: \u0085 x\u0085\u0085 y \u0085\u0085\u00a0nbsp\u2009thin\u3000ideographic\u2028line\u2029para\u0085nel\u200bzwsp\u205fmm
Tabs\t\tand   runs     of      spaces   \t \t end
Trailing spaces   
CRLF line\r\nnext\r\n\r\n\r\nafter blank CRLFs
Contractions: I'm you're he's we've they'll she'd don't I'M YOU'RE HE'S WE'VE THEY'LL SHE'D
Numbers: 1 12 123 1234 12345 123456 3.14159 1,000,000 ٣٤٥ ५६७ ⅛ ²³
Symbols: @#$%^&*()_+-=[]{}|;:'",.<>/?`~ ... !!! ??? --- ___ *** ===
Code:    def f(x):\n        return x ** 2  # comment
    if (a && b) { return c; }


Many newlines above; spaces at the very end   """


def write_shard_text(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def read_tokens(out_dir):
    """All tokens of the train shards, in order (llm.c format)."""
    toks = []
    for name in sorted(os.listdir(out_dir)):
        if name.startswith("train_") and name.endswith(".bin"):
            data = open(os.path.join(out_dir, name), "rb").read()
            magic, version, n = struct.unpack("<3i", data[:12])
            fmt = "H" if version == 1 else "I"
            toks += list(struct.unpack(f"<{n}{fmt}", data[1024:1024 + n * struct.calcsize(fmt)]))
    return toks


def input_files(paths):
    """The trainer's input order: sorted paths, each real file once."""
    seen, out = set(), []
    for p in paths:
        entries = sorted(os.path.join(p, n) for n in os.listdir(p)) if os.path.isdir(p) else [p]
        for e in entries:
            real = os.path.realpath(e)
            if os.path.isfile(real) and real not in seen:
                seen.add(real)
                out.append(e)
    return out


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def prepare(trainer, tmp, spec, inputs, name, extra=(), cwd=None, env=None):
    out = os.path.join(tmp, name)
    p = subprocess.run([trainer, "data", "prepare", "--tokenizer", spec, "--input", *inputs, "--output", out,
                        "--val-fraction", "0", "--threads", "2", *extra], capture_output=True, text=True, cwd=cwd,
                       env=env)
    if p.returncode != 0:
        print(p.stdout + p.stderr)
        return None
    return read_tokens(out)


def compare(label, got, want):
    i = first_difference(got, want)
    check(got is not None and i < 0,
          f"{label}: {len(want)} tokens equal the reference" if i < 0 else
          f"{label}: first difference at token {i}: got {got[i:i + 8]}, want {want[i:i + 8]}")


def main():
    trainer = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="tokcheck_")
    uni = os.path.join(tmp, "unicode.txt")
    write_shard_text(uni, UNICODE_TEXT)
    # Over the reader's 1 MB piece size, so it is cut at lines: the licences
    # and the unicode text shuffled into one 3 MB document.
    lic_files = input_files([LICENSES])
    paras = [open(f, encoding="utf-8").read() for f in lic_files] + [UNICODE_TEXT] * 20
    random.Random(0).shuffle(paras)
    big = os.path.join(tmp, "big.txt")
    write_shard_text(big, "\n".join(paras * 8))
    docs = [open(f, encoding="utf-8", newline="").read() for f in input_files([LICENSES, uni, big])]
    jsonl = os.path.join(tmp, "docs.jsonl.gz")
    with gzip.open(jsonl, "wt", encoding="utf-8") as f:
        for d in docs[:-1] + UNICODE_TEXT.split("\n"):
            f.write(json.dumps({"text": d, "id": 1}) + "\n")
    json_docs = docs[:-1] + UNICODE_TEXT.split("\n")

    families = []
    gpt2 = os.path.join(TOK, "gpt2.tiktoken")
    if check(os.path.exists(gpt2), "gpt2.tiktoken is fetched (scripts/fetch_tokenizers.sh)"):
        enc = tiktoken.Encoding("gpt2", pat_str=GPT2_PAT, mergeable_ranks=load_tiktoken_bpe(gpt2),
                                special_tokens={"<|endoftext|>": 50256})
        check(enc.encode_ordinary("Hello world") == [15496, 995], "gpt2 reference: 'Hello world' is [15496, 995]")
        families.append(("gpt2:" + gpt2, lambda t, e=enc: e.encode_ordinary(t), [50256]))
    llama3 = os.path.join(TOK, "llama3.tiktoken")
    if os.path.exists(llama3):
        ranks = load_tiktoken_bpe(llama3)
        enc3 = tiktoken.Encoding("llama3", pat_str=LLAMA3_PAT, mergeable_ranks=ranks, special_tokens={})
        families.append(("llama3:" + llama3, lambda t, e=enc3: e.encode_ordinary(t), [128000]))
    else:
        print("note: llama3.tiktoken not fetched; the Llama-3 comparison is left out")
    spm = os.path.join(TOK, "llama2_sp.model")
    if check(os.path.exists(spm), "llama2_sp.model is fetched (scripts/fetch_tokenizers.sh)"):
        sp = sentencepiece.SentencePieceProcessor(model_file=spm)
        families.append(("sentencepiece:" + spm, lambda t, s=sp: s.encode(t), [sp.bos_id()]))

    for spec, encode, start in families:
        name = spec.split(":")[0]
        want = []
        for d in docs:
            want += start + encode(d)
        compare(f"{name}: licences + unicode + a 3 MB document", prepare(trainer, tmp, spec, [LICENSES, uni, big], name),
                want)
        jwant = []
        for d in json_docs:
            jwant += start + encode(d)
        compare(f"{name}: the same text as gzip JSONL", prepare(trainer, tmp, spec, [jsonl], name + "_jsonl"), jwant)
    if os.path.exists(gpt2):
        # Text that spells a special token: an error naming the file and byte (tiktoken's encode), or as asked.
        text = "Hello <|endoftext|> world, and <|endoftext|>again\n"
        doc = os.path.join(tmp, "specials.txt")
        open(doc, "w").write(text)
        p = subprocess.run([trainer, "data", "prepare", "--tokenizer", "gpt2:" + gpt2, "--input", doc, "--output",
                            os.path.join(tmp, "sp_err")], capture_output=True, text=True)
        check(p.returncode == 3 and f"{doc}: byte 6: the text \"<|endoftext|>\"" in p.stderr + p.stdout,
              f"special-token text in a document: exit {p.returncode} (3) naming the file and byte")
        line = os.path.join(tmp, "specials.jsonl")
        open(line, "w").write(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": text}) + "\n")
        p = subprocess.run([trainer, "data", "prepare", "--tokenizer", "gpt2:" + gpt2, "--input", line, "--output",
                            os.path.join(tmp, "sp_err_jsonl")], capture_output=True, text=True)
        check(p.returncode == 3 and f"{line}:2: byte 6" in p.stderr + p.stdout,
              f"the same in a JSONL document: exit {p.returncode}, naming file:line")
        compare("--special-tokens text (tiktoken's encode_ordinary)",
                prepare(trainer, tmp, "gpt2:" + gpt2, [doc], "sp_text", extra=("--special-tokens", "text")),
                [50256] + enc.encode_ordinary(text))
        compare("--special-tokens special (tiktoken's encode, allowed_special='all')",
                prepare(trainer, tmp, "gpt2:" + gpt2, [doc], "sp_special", extra=("--special-tokens", "special")),
                [50256] + enc.encode(text, allowed_special="all"))
        # The family alone, from another working directory: the file is found beside the executable.
        env = {k: v for k, v in os.environ.items() if k != "TRAINER_TOKENIZER_DIR"}
        want = []
        for d in docs[:3]:
            want += [50256] + enc.encode_ordinary(d)
        compare("--tokenizer gpt2 run from another directory", prepare(
            os.path.abspath(trainer), tmp, "gpt2", lic_files[:3], "gpt2_elsewhere", cwd=tmp, env=env), want)
    if failures:
        sys.exit(1)


main()
