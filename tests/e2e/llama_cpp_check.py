"""Exported models in the runtimes people run them with (issue 44):
llama.cpp and transformers 5.

Models trained on the licence texts as `gpt2`, `llama3` and SentencePiece
tokens, exported with `ckpt export --format hf`, then:

- transformers 5 (third_party/hf5: torch 2.11.0, transformers 5.25.0):
  `generate(**tok(text))` greedy runs to max_new_tokens, or stops at the
  tokenizer's eos where the model emits it; forced through the ids the
  old exports took for end of text ("," 11, and 1 and 2, LlamaConfig's
  defaults) it goes on, and it stops at eos and only there.
- llama.cpp's own converter (convert_hf_to_gguf.py of the llama.cpp in
  llama-cpp-python 0.3.36, third_party/llama_cpp) makes a GGUF whose
  tokenizer.ggml.bos/eos_token_id are the tokenizer's, with the tied head
  stored once.
- transformers 5's tokenizer from the export and llama.cpp's from the GGUF
  encode every licence text as the references do (tiktoken, sentencepiece).
- llama.cpp itself (llama-cpp-python 0.3.36 in third_party/hf5): its mean NLL on a
  licence passage is transformers' within 1e-4 relative; its greedy ids are
  transformers' (up to the first step whose top two logits are within 1e-3,
  where either may be chosen); its completion runs to max_tokens unless the
  model emits eos, and forced as above it stops at eos and only there.

Run by /usr/bin/python3; re-runs itself under third_party/hf5.

usage: llama_cpp_check.py TRAINER [MPIEXEC]
"""
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import THIRD_PARTY, check, finish, reference_encoders, under_venv  # noqa: E402

torch, transformers, gguf, llama_cpp, numpy = under_venv(
    "hf5", ["torch", "transformers", "gguf", "llama_cpp", "numpy"])
CONVERTER = os.path.join(THIRD_PARTY, "llama_cpp", "convert_hf_to_gguf.py")
TOKENIZERS = os.path.join(THIRD_PARTY, "tokenizers")
LICENCES = "/usr/share/common-licenses"

RECIPE = """[run]
name = "{name}"
dir = "{run}"
[model]
arch = "{arch}"
vocab_size = {vocab}
d_model = 64
n_layers = 2
n_heads = 4
{kv}
d_ff = 256
seq_len = 64
tie_embeddings = true
[data]
train = ["{data}/train_*.bin"]
val = ["{data}/val_*.bin"]
[training]
steps = 60
global_batch = 8
micro_batch = 8
eval_every = 0
[optimizer]
lr = 3e-3
[checkpoint]
every = 60
"""

# name -> (tokenizer spec, arch, vocabulary, n_kv_heads line, (bos, eos)); the
# ids are the references' (OpenAI's GPT-2 config, Meta's Llama 3 base config,
# the SentencePiece model's own).
MODELS = {
    "gpt2": ("gpt2:" + os.path.join(TOKENIZERS, "gpt2.tiktoken"), "gpt2", 50304, "", (50256, 50256)),
    "llama3": ("llama3:" + os.path.join(TOKENIZERS, "llama3.tiktoken"), "llama", 128256, "n_kv_heads = 2",
               (128000, 128001)),
    "sentencepiece": ("sentencepiece:" + os.path.join(TOKENIZERS, "llama2_sp.model"), "llama", 32000, "", (1, 2)),
}
PROMPT = "This program is free software; you can redistribute it and/or modify"
NEW = 16


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def forced_ids(ends):
    """What the old exports ended text at (llama.cpp's fallback ",", LlamaConfig's 1 and 2), less
    this tokenizer's own ends, then its eos."""
    return [t for t in (11, 1, 2) if t not in ends] + [ends[1]]


def export(trainer, tmp, name):
    spec, arch, vocab, kv, _ = MODELS[name]
    data, rdir, out = (os.path.join(tmp, name + s) for s in ("_data", "_run", "_hf"))
    rc1, o1 = run([trainer, "data", "prepare", "--tokenizer", spec, "--input", LICENCES, "--output", data])
    recipe = os.path.join(tmp, name + ".toml")
    open(recipe, "w").write(RECIPE.format(name=name, run=rdir, arch=arch, vocab=vocab, kv=kv, data=data))
    rc2, o2 = run([trainer, "train", recipe])
    rc3, o3 = run([trainer, "ckpt", "export", os.path.join(rdir, "checkpoints"), "--format", "hf", "--output", out])
    if not check(rc1 == rc2 == rc3 == 0, f"{name}: data prepared, a model trained on it and exported"):
        print((o1 + o2 + o3)[-3000:])
        return None
    return out


def transformers_checks(name, out):
    """transformers 5: generate(**tok(text)) greedy, free and forced. Returns (tokenizer, model,
    prompt ids, free new ids, the top-two margin at each new step)."""
    ends = MODELS[name][4]
    tok = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    inputs = tok(PROMPT, return_tensors="pt")
    n = inputs["input_ids"].shape[1]
    forced = forced_ids(ends)

    class Force(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            i = input_ids.shape[1] - n
            if i < len(forced):
                scores[:] = -float("inf")
                scores[:, forced[i]] = 0
            return scores

    greedy = dict(max_new_tokens=NEW, do_sample=False, pad_token_id=ends[1])
    free = model.generate(**inputs, **greedy, output_scores=True, return_dict_in_generate=True)
    pushed = model.generate(**inputs, **greedy, logits_processor=transformers.LogitsProcessorList([Force()]))
    new = free.sequences[0, n:].tolist()
    margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in free.scores]
    check(sorted(inputs) == ["attention_mask", "input_ids"] and ends[1] not in new[:-1]
          and (len(new) == NEW or new[-1] == ends[1]) and pushed[0, n:].tolist() == forced,
          f"{name}: transformers {transformers.__version__} generate(**tok(text)) greedy gives {len(new)} new "
          f"tokens (max {NEW}, fewer only ending at eos {ends[1]}); forced through {forced[:-1]} it goes on and "
          f"stops at eos ({pushed[0, n:].tolist()})")
    return tok, model, inputs["input_ids"][0].tolist(), new, margins


def gguf_checks(name, out, tmp):
    """llama.cpp's converter; the GGUF's special ids and tensors. Returns the GGUF's path."""
    ends = MODELS[name][4]
    path = os.path.join(tmp, name + ".gguf")
    rc, o = run([sys.executable, CONVERTER, out, "--outfile", path, "--outtype", "f32"])
    if not check(rc == 0, f"{name}: llama.cpp's convert_hf_to_gguf.py converts the export (exit {rc})"):
        print(o[-3000:])
        return None
    reader = gguf.GGUFReader(path)
    field = lambda k: reader.get_field(k).contents() if reader.get_field(k) is not None else None  # noqa: E731
    got = (field("tokenizer.ggml.bos_token_id"), field("tokenizer.ggml.eos_token_id"))
    names = [t.name for t in reader.tensors]
    check(got == ends and "output.weight" not in names and names.count("token_embd.weight") == 1,
          f"{name}: the GGUF's tokenizer.ggml.bos/eos_token_id are {got} (the tokenizer's {ends}); the tied "
          f"head is stored once ({len(names)} tensors, output.weight {'present' if 'output.weight' in names else 'absent'})")
    return path


def llama_cpp_checks(name, path, tok, model, prompt, new, margins):
    ends = MODELS[name][4]
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, logits_all=True, verbose=False, seed=0,
                          n_threads=max(1, min(2, os.cpu_count() or 1)))
    texts = [open(os.path.join(LICENCES, f), encoding="utf-8").read() for f in sorted(os.listdir(LICENCES))]
    ref = reference_encoders()[name]
    want = [ref(t) for t in texts]
    theirs = sum(tok(t)["input_ids"] != w for t, w in zip(texts, want))
    ours = sum(llm.tokenize(t.encode(), add_bos=True, special=False) != w for t, w in zip(texts, want))
    check(theirs == ours == 0 and (llm.token_bos(), llm.token_eos()) == ends,
          f"{name}: transformers {transformers.__version__}'s tokenizer from the export and llama.cpp's from the "
          f"GGUF encode all {len(texts)} licence texts as the reference does ({theirs} and {ours} differ); "
          f"llama.cpp's bos/eos are {(llm.token_bos(), llm.token_eos())}")

    # Mean NLL of a licence passage (the model's 64 positions).
    ids = tok(texts[0])["input_ids"][:64]
    llm.reset()
    llm.eval(ids)
    logits = numpy.asarray(llm.scores[:len(ids) - 1], dtype=numpy.float64)
    lse = numpy.log(numpy.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    ours = float(numpy.mean(lse - logits[numpy.arange(len(ids) - 1), ids[1:]]))
    with torch.no_grad():
        theirs = float(torch.nn.functional.cross_entropy(model(torch.tensor([ids])).logits[0, :-1].double(),
                                                         torch.tensor(ids[1:])))
    check(abs(ours - theirs) <= 1e-4 * theirs,
          f"{name}: llama.cpp's mean NLL on {len(ids)} licence tokens {ours:.7f}, transformers' {theirs:.7f} "
          f"(difference {abs(ours - theirs):.1e})")

    # Greedy completion: the same ids as transformers' up to the first near tie; to max_tokens unless eos.
    llm.reset()
    got = []
    for t in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
        got.append(t)
        if t == ends[1] or len(got) == NEW:
            break
    sure = next((i for i, m in enumerate(margins) if m < 1e-3), len(margins))
    done = llm.create_completion(prompt, max_tokens=NEW, temperature=0.0)
    reason, count = done["choices"][0]["finish_reason"], done["usage"]["completion_tokens"]
    want = ("stop", len(new) - 1) if new and new[-1] == ends[1] else ("length", NEW)
    check(got[:sure] == new[:sure] and (reason, count) == want,
          f"{name}: llama.cpp's greedy ids equal transformers' ({sure} of {len(new)} compared: "
          f"{got[:sure] == new[:sure]}); its completion ends '{reason}' after {count} tokens (expected {want})")

    forced = forced_ids(ends)

    def force(input_ids, scores):
        i = len(input_ids) - len(prompt)
        if i < len(forced):
            scores[:] = -numpy.inf
            scores[forced[i]] = 0
        return scores

    done = llm.create_completion(prompt, max_tokens=NEW, temperature=0.0,
                                 logits_processor=llama_cpp.LogitsProcessorList([force]))
    reason, count, text = (done["choices"][0]["finish_reason"], done["usage"]["completion_tokens"],
                           done["choices"][0]["text"])
    check((reason, count) == ("stop", len(forced) - 1) and text == tok.decode(forced[:-1]),
          f"{name}: forced through {forced[:-1]} ({text!r}), llama.cpp's completion goes on and stops at eos "
          f"{ends[1]}: '{reason}' after {count} tokens")


def main():
    trainer = os.path.abspath(sys.argv[1])
    if not check(os.path.exists(CONVERTER), f"llama.cpp's converter is at {CONVERTER} (scripts/setup.sh test)"):
        finish("llama.cpp")
    with tempfile.TemporaryDirectory(prefix="llamacpp_") as tmp:
        for name in MODELS:
            out = export(trainer, tmp, name)
            if out is None:
                continue
            cfg = json.load(open(os.path.join(out, "config.json")))
            check((cfg.get("bos_token_id"), cfg.get("eos_token_id")) == MODELS[name][4],
                  f"{name}: config.json names bos/eos {MODELS[name][4]}")
            tok, model, prompt, new, margins = transformers_checks(name, out)
            path = gguf_checks(name, out, tmp)
            if path is not None:
                llama_cpp_checks(name, path, tok, model, prompt, new, margins)
    finish("llama.cpp and transformers 5")


if __name__ == "__main__":
    main()
