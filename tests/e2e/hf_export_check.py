"""`trainer ckpt export --format hf` against Hugging Face transformers
itself: a directory that AutoModelForCausalLM.from_pretrained loads as it
is and that computes the trainer's own validation loss on the same tokens
(fp32, within 1e-4 relative), for gpt2 and llama (GQA), tied and untied;
a bf16 export holds the bf16 rounding of the fp32 one; a sharded export
(index file) loads to the same loss. Import (`checkpoint.init_from`): a
randomly initialised transformers model saved with save_pretrained gives
the trainer's first-step loss equal to transformers' loss on that batch
(also on 2 ranks as tp = 2); export -> init_from gives back the exact
weights; a model that differs from the recipe is refused (exit 4) with
every difference listed.

transformers 4.46.3 is pinned (scripts/setup.sh test, third_party/pyref):
the newest 4.x we found that runs models on Debian 12's torch 1.13, with
Llama's GQA, rope_theta and Llama 3 RoPE scaling, so a scaled export is
run by transformers itself. transformers 5.25.0 (third_party/hf5, with
PyPI's torch, as it needs a newer one than Debian's) rewrites an exported config.json as it
saves models today (rope_parameters), and the import must read that file.

usage: hf_export_check.py TRAINER MPIEXEC
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import THIRD_PARTY, check, failures, reference_encoders, tensors, tiny_recipe, under_pyref  # noqa: E402

torch, transformers, safetensors_torch, sentencepiece = under_pyref(
    ["torch", "transformers", "safetensors.torch", "sentencepiece"])
load_file = safetensors_torch.load_file


def write_recipe(path, run, arch, tied, data, changes=None):
    """Writes the tiny recipe as these checks train it (T = 32, 10 steps at lr
    3e-3, evaluated and saved at the end) for arch, tie_embeddings = tied, on
    data's shards, with changes on top; returns path."""
    return tiny_recipe(path, {"run.name": "hf", "run.dir": run, "model.arch": arch, "model.seq_len": 32,
                              "model.tie_embeddings": tied, "data.train": [f"{data}/train_*.bin"],
                              "data.val": [f"{data}/val_*.bin"], "training.steps": 10, "training.eval_every": 10,
                              "training.eval_batches": 2, "optimizer.lr": 3e-3, "checkpoint.every": 10,
                              **(changes or {})})


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def val_tokens(data, n, T):
    """The first n validation samples, unshuffled, as the trainer evaluates them."""
    raw = open(os.path.join(data, "val_000000.bin"), "rb").read()
    count = struct.unpack("<3i", raw[:12])[2]
    toks = struct.unpack(f"<{count}H", raw[1024:1024 + 2 * count])
    return torch.tensor([toks[k * T:k * T + T + 1] for k in range(n)], dtype=torch.long)


def hf_loss(model_dir, batch):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(batch[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).item()


def main():
    trainer = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="hfexport_")
    data = os.path.join(tmp, "data")
    run([trainer, "data", "prepare", "--input", "/usr/share/common-licenses", "--output", data])
    batch = val_tokens(data, 4, 32)  # eval_batches x micro_batch x dp
    for arch, tied in (("gpt2", "true"), ("gpt2", "false"), ("llama", "true"), ("llama", "false")):
        name = f"{arch}_{'tied' if tied == 'true' else 'untied'}"
        recipe = os.path.join(tmp, name + ".toml")
        rdir = os.path.join(tmp, name)
        write_recipe(recipe, rdir, arch, tied == "true", data, {"model.n_kv_heads": 2} if arch == "llama" else None)
        rc, out = run([trainer, "train", recipe])
        if not check(rc == 0, f"{name}: trains"):
            print(out)
            continue
        val = [json.loads(l)["val_loss"] for l in open(os.path.join(rdir, "metrics.jsonl")) if "val_loss" in l][-1]
        step = os.path.join(rdir, "checkpoints", "step_00000010")
        hf = os.path.join(tmp, name + "_hf")
        rc, out = run([trainer, "ckpt", "export", step, "--format", "hf", "--output", hf])
        cfg = json.load(open(os.path.join(hf, "config.json"))) if rc == 0 else {}
        # Bytes define no special tokens: bos/eos are null (not LlamaConfig's 1 and 2), no generation_config.json.
        check(rc == 0 and sorted(os.listdir(hf)) == ["config.json", "model.safetensors"]
              and cfg.get("tie_word_embeddings") == (tied == "true")
              and "bos_token_id" in cfg and cfg["bos_token_id"] is None and cfg["eos_token_id"] is None
              and 'tokenizer "bytes"' in out,
              f"{name}: export writes config.json + model.safetensors, bos/eos null (bytes define none), "
              f"and says it writes no tokenizer")
        got = hf_loss(hf, batch)
        check(abs(got - val) / val < 1e-4, f"{name}: transformers {transformers.__version__} from_pretrained "
                                           f"gives the trainer's val loss {val:.6f} ({got:.6f})")
        if name == "llama_untied":
            sharded = os.path.join(tmp, name + "_sharded")
            rc, out = run([trainer, "ckpt", "export", step, "--format", "hf", "--output", sharded, "--shard-mb", "0.02"])
            shards = sorted(f for f in os.listdir(sharded) if f.endswith(".safetensors")) if rc == 0 else []
            check(len(shards) >= 2 and os.path.exists(os.path.join(sharded, "model.safetensors.index.json"))
                  and abs(hf_loss(sharded, batch) - got) <= 1e-6 * got,
                  f"{name}: a sharded export ({len(shards)} files + index) loads to the same loss")
            half = os.path.join(tmp, name + "_bf16")
            rc, out = run([trainer, "ckpt", "export", step, "--format", "hf", "--output", half, "--dtype", "bf16"])
            a, b = load_file(os.path.join(hf, "model.safetensors")), load_file(os.path.join(half, "model.safetensors"))
            same = sorted(a) == sorted(b) and all(b[k].dtype == torch.bfloat16 and torch.equal(a[k].bfloat16(), b[k])
                                                  for k in a)
            check(rc == 0 and same, f"{name}: a bf16 export holds torch's bf16 rounding of the fp32 one ({len(a)} tensors)")
            rc, out = run([trainer, "ckpt", "export", step, "--format", "hf", "--output", hf])
            check(rc == 4 and "not empty" in out, f"{name}: exporting onto a non-empty directory is refused (exit 4)")
    import_checks(trainer, tmp, data)
    rope_checks(trainer, tmp, data)
    scaled_loss_checks(trainer, tmp, data)
    transformers5_checks(trainer, tmp)
    hostile_checks(trainer, tmp, data)
    tokenizer_files(trainer, tmp)
    if failures:
        sys.exit(1)


def tokenizer_files(trainer, tmp):
    """A run on GPT-2 (Llama-3, SentencePiece) tokens exports the tokenizer too: AutoTokenizer from
    the directory encodes every licence text as tiktoken (sentencepiece) does."""
    tok_dir = os.path.join(THIRD_PARTY, "tokenizers")
    refs = reference_encoders()
    texts = [open(os.path.join("/usr/share/common-licenses", f), encoding="utf-8").read()
             for f in sorted(os.listdir("/usr/share/common-licenses"))]
    for spec, arch, vocab in (("gpt2:" + os.path.join(tok_dir, "gpt2.tiktoken"), "gpt2", 50304),
                              ("sentencepiece:" + os.path.join(tok_dir, "llama2_sp.model"), "llama", 32000),
                              ("llama3:" + os.path.join(tok_dir, "llama3.tiktoken"), "llama", 128256)):
        name = spec.split(":")[0]
        ref = refs[name]
        data = os.path.join(tmp, name + "_data")
        run([trainer, "data", "prepare", "--tokenizer", spec, "--input", "/usr/share/common-licenses", "--output", data])
        recipe = os.path.join(tmp, name + "_tok.toml")
        rdir = os.path.join(tmp, name + "_tok")
        write_recipe(recipe, rdir, arch, True, data, {"model.vocab_size": vocab, "training.steps": 2,
                                                      "training.eval_every": 2, "checkpoint.every": 2})
        rc, out = run([trainer, "train", recipe, "--set", "training.eval_every=0"])
        out_dir = os.path.join(tmp, name + "_tok_hf")
        rc2, out2 = run([trainer, "ckpt", "export", os.path.join(rdir, "checkpoints"), "--format", "hf", "--output", out_dir])
        if not check(rc == 0 and rc2 == 0, f"{name}: a run on its tokens, exported"):
            print(out + out2)
            continue
        differ = -1
        # The fast tokenizer (tokenizer.json) and the slow one: GPT-2's from vocab.json and merges.txt,
        # LlamaTokenizer's from tokenizer.model. Llama-3 has no slow tokenizer.
        toks = [transformers.AutoTokenizer.from_pretrained(out_dir)]
        if name == "gpt2":
            toks.append(transformers.AutoTokenizer.from_pretrained(out_dir, use_fast=False))
        if name == "sentencepiece":
            toks.append(transformers.LlamaTokenizer.from_pretrained(out_dir))
        for tok in toks:
            differ = max(differ, sum(tok(t)["input_ids"] != ref(t) for t in texts))
        kinds = " and ".join(type(t).__name__ for t in toks)
        check(differ == 0, f"{name}: AutoTokenizer ({kinds}) from the export encodes all {len(texts)} licence "
                           f"texts as the reference does ({differ} differ); files {sorted(os.listdir(out_dir))}")
        generation_checks(name, out_dir, texts[0])
        if name == "gpt2":
            # 44 init_from reads the ids back: the export starts a run on the same data; a config whose
            # eos is another token (LlamaConfig's default 2, say) is refused, naming the field (exit 4).
            other = out_dir + "_other_eos"
            shutil.copytree(out_dir, other)
            cfg = json.load(open(os.path.join(other, "config.json")))
            cfg["eos_token_id"] = 2
            json.dump(cfg, open(os.path.join(other, "config.json"), "w"))
            back = [run([trainer, "train", recipe, "--set", "training.eval_every=0", "--set", f'run.dir="{rdir}_{k}"',
                         "--set", f'checkpoint.init_from="{d}"']) for k, d in (("same", out_dir), ("other", other))]
            check(back[0][0] == 0 and back[1][0] == 4 and "eos_token_id: config.json 2" in back[1][1]
                  and "50256" in back[1][1],
                  f"44 {name}: init_from its own export trains (exit {back[0][0]}); with eos 2 in config.json it "
                  f"is refused naming eos_token_id and the data's 50256 (exit {back[1][0]})")
        # Text spelling special tokens: the export and `data prepare --special-tokens special` agree, and the
        # default (an error, as tiktoken's) refuses such text, so the two never disagree on data they both accept.
        specials = {"gpt2": {"<|endoftext|>": 50256}, "llama3": {"<|end_of_text|>": 128001},
                    "sentencepiece": {"<s>": 1, "</s>": 2, "<unk>": 0}}[name]
        text = "before " + " mid ".join(specials) + " after"
        doc = os.path.join(tmp, name + "_special.txt")
        open(doc, "w").write(text)
        rc, out = run([trainer, "data", "prepare", "--tokenizer", spec, "--input", doc, "--output",
                       os.path.join(tmp, name + "_special_refused"), "--val-fraction", "0"])
        first = next(iter(specials))
        check(rc != 0 and f'"{first}"' in out and "--special-tokens" in out,
              f"{name}: text spelling {first}: refused by default, the text and the flag named (exit {rc})")
        sp_data = os.path.join(tmp, name + "_special_data")
        rc, out = run([trainer, "data", "prepare", "--tokenizer", spec, "--input", doc, "--output", sp_data,
                       "--val-fraction", "0", "--special-tokens", "special"])
        rc3, head = run([trainer, "data", "inspect", os.path.join(sp_data, "train_000000.bin"), "--head", "100"])
        ours = [int(x) for x in head.strip().split("\n")[1].split()] if rc == 0 and rc3 == 0 else []
        tok = transformers.AutoTokenizer.from_pretrained(out_dir)
        theirs = tok(text)["input_ids"]
        if name == "gpt2":
            theirs = [50256] + theirs  # the export's GPT-2 tokenizer adds no mark; prepare puts <|endoftext|> first
        check(ours == theirs and all(i in ours[1:] for i in specials.values()),
              f"{name}: text spelling {', '.join(specials)}: the exported tokenizer and --special-tokens special "
              f"give the same ids, the special ones among them ({ours[:12]} / {theirs[:12]})")


# The special ids each tokenizer defines (the references: OpenAI's GPT-2
# config, Meta's Llama 3 base config, the SentencePiece model's own ids).
SPECIAL_IDS = {"gpt2": (50256, 50256, None), "llama3": (128000, 128001, None)}


def generation_checks(name, out_dir, prompt):
    """44 The export names its tokenizer's special ids (config.json and
    generation_config.json), its tokenizer gives only the model's inputs, and
    transformers' greedy generate(**tok(text)) runs on it, stopping at the
    tokenizer's eos when the model emits it (forced here at the 4th new
    token) and only there: running to max_new_tokens otherwise."""
    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    gen = json.load(open(os.path.join(out_dir, "generation_config.json")))
    if name == "sentencepiece":
        sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(out_dir, "tokenizer.model"))
        want = (sp.bos_id(), sp.eos_id(), sp.pad_id() if sp.pad_id() >= 0 else None)
    else:
        want = SPECIAL_IDS[name]
    got = (cfg.get("bos_token_id"), cfg.get("eos_token_id"), cfg.get("pad_token_id"))
    check(got == want and (gen.get("bos_token_id"), gen.get("eos_token_id")) == want[:2]
          and cfg.get("transformers_version"),
          f"{name}: config.json and generation_config.json name the tokenizer's bos/eos/pad {want} ({got})")
    tok = transformers.AutoTokenizer.from_pretrained(out_dir)
    # The first 8 tokens: with 12 new ones within GPT-2's 32 positions here.
    inputs = {k: v[:, :8] for k, v in tok(prompt, return_tensors="pt").items()}
    model = transformers.AutoModelForCausalLM.from_pretrained(out_dir)
    eos = want[1]

    class ForceEos(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            if input_ids.shape[1] - inputs["input_ids"].shape[1] == 3:
                scores[:] = -float("inf")
                scores[:, eos] = 0
            return scores

    n = inputs["input_ids"].shape[1]
    # synced_gpus=False: left unset, generate() asks whether the model is FSDP-wrapped, which imports
    # torch.distributed.fsdp, and Debian's torch 1.13 cannot import that under Python 3.11 (a
    # dataclass default Python 3.11 refuses). Nothing of the export's is involved.
    greedy = dict(max_new_tokens=12, do_sample=False, synced_gpus=False)
    try:
        free = model.generate(**inputs, **greedy)
        forced = model.generate(**inputs, **greedy, logits_processor=transformers.LogitsProcessorList([ForceEos()]))
        ok, why = True, ""
    except Exception as e:  # noqa: BLE001 - the failure is the finding
        ok, why, free, forced = False, f"{e!r} (prompt of {n} tokens)", None, None
    new = free[0, n:].tolist() if ok else []
    check(ok and sorted(inputs) == ["attention_mask", "input_ids"] and eos not in new[:-1]
          and (len(new) == 12 or new[-1] == eos) and forced.shape[1] == n + 4 and int(forced[0, -1]) == eos,
          f"{name}: transformers {transformers.__version__} generate(**tok(text)) greedy runs to max_new_tokens "
          f"and stops at eos {eos} when the model emits it {why}")


def one_batch_shard(path, tokens):
    """An llm.c shard holding exactly len(tokens) tokens."""
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *[0] * 253) + struct.pack(f"<{len(tokens)}H", *tokens))


def import_checks(trainer, tmp, data):
    # One global batch of data (4 samples of 32 + 1 tokens): step 1 sees exactly these samples.
    batch = val_tokens(data, 4, 32)
    one = os.path.join(tmp, "one_batch")
    os.makedirs(one)
    toks = []
    for k in range(4):
        toks += batch[k, :32].tolist()
    toks.append(batch[3, 32].item())
    one_batch_shard(os.path.join(one, "train_000000.bin"), toks)
    samples = torch.tensor([toks[k * 32:k * 32 + 33] for k in range(4)])
    torch.manual_seed(0)
    for arch, tied, mpi in (("gpt2", True, False), ("llama", False, True)):
        name = f"random_{arch}"
        if arch == "gpt2":
            cfg = transformers.GPT2Config(vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=32,
                                          activation_function="gelu_new", resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
        else:
            cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                           rms_norm_eps=1e-5, tie_word_embeddings=False)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        src = os.path.join(tmp, name)
        model.save_pretrained(src, safe_serialization=True)
        want = hf_loss(src, samples)
        recipe = os.path.join(tmp, name + ".toml")
        rdir = os.path.join(tmp, name + "_run")
        write_recipe(recipe, rdir, arch, tied, one, {"model.n_kv_heads": 2} if arch == "llama" else None)
        sets = ["--set", f'checkpoint.init_from="{src}"', "--set", "training.steps=1", "--set", "training.log_every=1",
                "--set", "training.eval_every=0", "--set", 'data.val=[]', "--set", "model.norm_eps=1e-5",
                "--set", "training.micro_batch=4"]
        mpirun = sys.argv[2]
        cmd = ([mpirun, "-np", "2", trainer, "train", recipe, *sets, "--set", "parallel.tp=2"] if mpi else
               [trainer, "train", recipe, *sets])
        rc, out = run(cmd)
        got = [json.loads(l)["loss"] for l in open(os.path.join(rdir, "metrics.jsonl"))][0] if rc == 0 else float("nan")
        check(rc == 0 and "weights from the Hugging Face model" in out and abs(got - want) / want < 1e-4,
              f"{name}{' (tp = 2)' if mpi else ''}: init_from a save_pretrained model: first-step loss "
              f"{got:.6f}, transformers {want:.6f}")
        if rc != 0:
            print(out)
    # GPT2Config's default n_inner is saved as null: it means 4 * n_embd, not a field of the wrong type.
    src = os.path.join(tmp, "random_gpt2_default_inner")
    transformers.AutoModelForCausalLM.from_config(transformers.GPT2Config(
        vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_positions=32)).save_pretrained(src, safe_serialization=True)
    null_inner = json.load(open(os.path.join(src, "config.json"))).get("n_inner", "absent")
    recipe = os.path.join(tmp, "default_inner.toml")
    write_recipe(recipe, src + "_run", "gpt2", True, one)
    rc, out = run([trainer, "train", recipe, "--set", f'checkpoint.init_from="{src}"', "--set", "training.steps=1",
                   "--set", "model.d_ff=128", "--set", "training.eval_every=0", "--set", "data.val=[]"])
    check(rc == 0, f"a GPT-2 saved with the default n_inner (config.json n_inner = {null_inner}) loads with d_ff = 128")
    if rc != 0:
        print(out[-1500:])
    # export -> init_from: the weights come back exactly (an lr of 1e-30 moves no fp32 weight by an ulp).
    src_ck = os.path.join(tmp, "llama_untied", "checkpoints", "step_00000010")
    hf = os.path.join(tmp, "llama_untied_hf")
    rdir = os.path.join(tmp, "roundtrip")
    recipe = os.path.join(tmp, "roundtrip.toml")
    write_recipe(recipe, rdir, "llama", False, data, {"model.n_kv_heads": 2})
    rc, out = run([trainer, "train", recipe, "--set", f'checkpoint.init_from="{hf}"', "--set", "training.steps=1",
                   "--set", "checkpoint.every=1", "--set", "optimizer.lr=1e-30", "--set", "optimizer.min_lr=1e-30",
                   "--set", "optimizer.warmup_steps=0", "--set", "training.eval_every=0"])
    a = {k: v for k, v in tensors(src_ck).items() if k[1].startswith("param/")}
    b = {k: v for k, v in tensors(os.path.join(rdir, "checkpoints", "step_00000001")).items() if k[1].startswith("param/")}
    check(rc == 0 and sorted(a) == sorted(b) and all((a[k] == b[k]).all() for k in a),
          f"export -> init_from: all {len(a)} weight tensors come back bit-identical")
    rc, out = run([trainer, "ckpt", "inspect", os.path.join(rdir, "checkpoints")])
    check(rc == 0 and f"weights first loaded from the Hugging Face model {hf}" in out,
          "the first checkpoint records where the weights came from (ckpt inspect names the directory)")
    rc, out = run([trainer, "train", recipe, "--set", f'checkpoint.init_from="{hf}"', "--set", "model.d_ff=128",
                   "--set", "model.n_kv_heads=4", "--set", f'run.dir="{rdir}_bad"'])
    check(rc == 4 and "intermediate_size" in out and "num_key_value_heads" in out,
          "init_from a model that differs from the recipe: exit 4, every differing field listed")


LLAMA3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=16)
LLAMA3_TOML = ('{ rope_type = "llama3", factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, '
               'original_max_position_embeddings = 16 }')


def rope_checks(trainer, tmp, data):
    """Llama 3 RoPE scaling trains, exports into config.json and loads back
    exactly; a recipe without it is refused by name. transformers 5's
    rope_parameters form is read (theta and scaling), a differing theta named
    with both values; scaling types and model fields the trainer does not
    implement are refused by name."""
    name = "llama3_scaled"
    recipe = os.path.join(tmp, name + ".toml")
    rdir = os.path.join(tmp, name)
    write_recipe(recipe, rdir, "llama", False, data, {"model.n_kv_heads": 2})
    scaled = ["--set", f"model.rope_scaling={LLAMA3_TOML}", "--set", "model.rope_theta=500000.0"]
    rc, out = run([trainer, "train", recipe, *scaled, "--set", "training.steps=2", "--set", "checkpoint.every=2",
                   "--set", "training.eval_every=0"])
    hf = os.path.join(tmp, name + "_hf")
    if rc == 0:
        rc, out = run([trainer, "ckpt", "export", os.path.join(rdir, "checkpoints", "step_00000002"), "--format", "hf",
                       "--output", hf])
    cfg = json.load(open(os.path.join(hf, "config.json"))) if rc == 0 else {}
    if not check(rc == 0 and cfg.get("rope_scaling") == LLAMA3 and cfg.get("rope_theta") == 500000.0,
                 f"{name}: trains and exports rope_scaling {cfg.get('rope_scaling')} into config.json"):
        print(out)
        return
    back = os.path.join(tmp, name + "_back")
    frozen = ["--set", "training.steps=1", "--set", "checkpoint.every=1", "--set", "optimizer.lr=1e-30",
              "--set", "optimizer.min_lr=1e-30", "--set", "optimizer.warmup_steps=0", "--set", "training.eval_every=0"]
    rc, out = run([trainer, "train", recipe, *scaled, "--set", f'checkpoint.init_from="{hf}"', *frozen,
                   "--set", f'run.dir="{back}"'])
    a = {k[1]: v for k, v in tensors(os.path.join(rdir, "checkpoints", "step_00000002")).items() if k[1].startswith("param/")}
    b = {k[1]: v for k, v in tensors(os.path.join(back, "checkpoints", "step_00000001")).items()
         if k[1].startswith("param/")} if rc == 0 else {}
    check(rc == 0 and sorted(a) == sorted(b) and all((a[k] == b[k]).all() for k in a),
          f"{name}: export -> init_from with the same scaling: all {len(a)} weight tensors come back bit-identical")
    rc, out = run([trainer, "train", recipe, "--set", "model.rope_theta=500000.0", "--set",
                   f'checkpoint.init_from="{hf}"', "--set", f'run.dir="{back}_unscaled"'])
    check(rc == 4 and "rope_scaling: recipe {}" in out and "llama3" in out,
          f"{name}: a recipe without the scaling is refused (exit 4, rope_scaling named with both values)")

    def variant(label, edit, sets, want_rc, *words):
        d = os.path.join(tmp, f"{name}_{label}")
        shutil.copytree(hf, d)
        c = json.load(open(os.path.join(d, "config.json")))
        edit(c)
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
        rc, out = run([trainer, "train", recipe, *sets, "--set", f'checkpoint.init_from="{d}"', *frozen,
                       "--set", f'run.dir="{d}_run"'])
        ok = rc == want_rc and all(w in out for w in words)
        check(ok, f"{name}: {label}: exit {rc}" + (f", naming {', '.join(words)}" if words else ""))
        if not ok:
            print(out[-2000:])

    def v5(c, rope_type="llama3"):  # transformers 5: theta and scaling in rope_parameters
        c["rope_parameters"] = dict(LLAMA3, rope_type=rope_type, rope_theta=c.pop("rope_theta"))
        del c["rope_scaling"]

    variant("transformers 5 rope_parameters, matching recipe", v5, scaled, 0)
    variant("transformers 5 rope_parameters, recipe at the default theta", v5,
            ["--set", f"model.rope_scaling={LLAMA3_TOML}"], 4, "rope_parameters.rope_theta: recipe 10000, "
            "config.json 500000")
    variant("transformers 5 rope_parameters without scaling (default type)",
            lambda c: (v5(c), c["rope_parameters"].update(rope_type="default")), scaled, 4, "rope_scaling: recipe {")
    variant("rope_type yarn", lambda c: v5(c, "yarn"), scaled, 4, '"yarn"')
    variant("attention_bias true", lambda c: c.update(attention_bias=True), scaled, 4, "attention_bias")
    variant("an unknown scaling field", lambda c: c["rope_scaling"].update(beta_fast=32), scaled, 4, "beta_fast")


FROZEN = ["--set", "training.steps=1", "--set", "checkpoint.every=1", "--set", "optimizer.lr=1e-30",
          "--set", "optimizer.min_lr=1e-30", "--set", "optimizer.warmup_steps=0"]


def scaled_loss_checks(trainer, tmp, data):
    """Llama 3 scaling computed as transformers 4.46 computes it. A random
    transformers model with llama3 scaling (theta 500000; q and k weights 16x,
    v, o and the head larger too, so that positions move the loss) is loaded
    by init_from and evaluated unchanged (lr 1e-30): the trainer's validation
    loss equals transformers' on the same tokens (1e-4 relative), the
    trainer's export of it gives that loss again in transformers, and the same
    weights without the scaling give a loss at least 20x the tolerance away."""
    batch = val_tokens(data, 4, 32)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                   rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=500000.0,
                                   rope_scaling=dict(LLAMA3))
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj, k in (("q_proj", 16), ("k_proj", 16), ("v_proj", 4), ("o_proj", 4)):
                getattr(layer.self_attn, proj).weight.mul_(k)
        model.lm_head.weight.mul_(8)
    src = os.path.join(tmp, "scaled_src")
    model.save_pretrained(src, safe_serialization=True)
    want = hf_loss(src, batch)
    plain = os.path.join(tmp, "scaled_src_without_scaling")
    shutil.copytree(src, plain)
    c = json.load(open(os.path.join(plain, "config.json")))
    c.pop("rope_scaling")
    json.dump(c, open(os.path.join(plain, "config.json"), "w"))
    unscaled = hf_loss(plain, batch)
    recipe = os.path.join(tmp, "scaled_loss.toml")
    rdir = os.path.join(tmp, "scaled_loss")
    write_recipe(recipe, rdir, "llama", False, data, {"model.n_kv_heads": 2})
    rc, out = run([trainer, "train", recipe, "--set", f"model.rope_scaling={LLAMA3_TOML}", "--set",
                   "model.rope_theta=500000.0", "--set", "model.norm_eps=1e-5", "--set",
                   f'checkpoint.init_from="{src}"', *FROZEN, "--set", "training.eval_every=1"])
    val = [json.loads(l)["val_loss"] for l in open(os.path.join(rdir, "metrics.jsonl")) if "val_loss" in l][-1] \
        if rc == 0 else float("nan")
    if not check(abs(val - want) / want < 1e-4 and abs(unscaled - want) / want > 2e-3,
                 f"llama3 scaling: the trainer's val loss {val:.6f} equals transformers {transformers.__version__}' "
                 f"{want:.6f} (without the scaling transformers gives {unscaled:.6f})"):
        print(out[-2000:])
        return
    hf = os.path.join(tmp, "scaled_loss_hf")
    rc, out = run([trainer, "ckpt", "export", os.path.join(rdir, "checkpoints", "step_00000001"), "--format", "hf",
                   "--output", hf])
    got = hf_loss(hf, batch) if rc == 0 else float("nan")
    check(abs(got - want) / want < 1e-6, f"llama3 scaling: the trainer's export loads in transformers to the same "
                                         f"loss ({got:.6f})")


def transformers5_checks(trainer, tmp):
    """config.json as transformers 5 itself writes it: LlamaConfig.from_pretrained of the scaled and
    the unscaled exports, save_pretrained into a copy (theta and scaling move into rope_parameters). Each
    loads with its matching recipe; a recipe at another theta is refused, the field named with both values."""
    hf5 = os.path.join(THIRD_PARTY, "hf5", "bin", "python")
    script = ("import sys, transformers as t; c = t.LlamaConfig.from_pretrained(sys.argv[1]); "
              "c.save_pretrained(sys.argv[2]); print(t.__version__)")
    for name, kv, sets, theta in (("llama3_scaled_hf", {"model.n_kv_heads": 2},
                                   ["--set", f"model.rope_scaling={LLAMA3_TOML}", "--set", "model.rope_theta=500000.0"],
                                   "500000"),
                                  ("llama_untied_hf", {"model.n_kv_heads": 2}, [], "10000")):
        src = os.path.join(tmp, name)
        dst = os.path.join(tmp, name + "_v5")
        p = subprocess.run([hf5, "-c", script, src, dst], capture_output=True, text=True)
        version = p.stdout.strip()
        cfg = json.load(open(os.path.join(dst, "config.json"))) if p.returncode == 0 else {}
        params = cfg.get("rope_parameters", {})
        if not check(p.returncode == 0 and "rope_theta" not in cfg and "rope_scaling" not in cfg
                     and params.get("rope_theta") == float(theta),
                     f"transformers {version or '5'} rewrites {name}/config.json with rope_parameters {params}"):
            print(p.stderr[-1500:])
            continue
        shutil.copy(os.path.join(src, "model.safetensors"), dst)
        recipe = os.path.join(tmp, name + "_v5.toml")
        write_recipe(recipe, dst + "_run", "llama", False, os.path.join(tmp, "data"), kv)
        rc, out = run([trainer, "train", recipe, *sets, "--set", f'checkpoint.init_from="{dst}"', *FROZEN,
                       "--set", "training.eval_every=0"])
        check(rc == 0 and "weights from the Hugging Face model" in out,
              f"{name}: transformers 5's config.json loads with the matching recipe (exit {rc})")
        other = "500000.0" if theta == "10000" else "10000.0"
        rc, out = run([trainer, "train", recipe, *sets, "--set", f"model.rope_theta={other}", "--set",
                       f'checkpoint.init_from="{dst}"', *FROZEN, "--set", f'run.dir="{dst}_run_bad"'])
        words = [f"rope_parameters.rope_theta: recipe {other[:-2]}", f"config.json {theta}"]
        ok = rc == 4 and all(w in out for w in words)
        check(ok, f"{name}: transformers 5's config.json with a recipe at theta {other}: exit {rc}, naming both values")
        if not ok:
            print(out[-1500:])


def hostile_checks(trainer, tmp, data):
    """Tampered model directories (classes of them, each with variants): every
    one refused with exit 4 naming the file and the tensor or entry, none
    loaded as zeros, none read outside the directory."""
    src = os.path.join(tmp, "llama_untied_hf")
    raw = open(os.path.join(src, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, body = json.loads(raw[8:8 + n]), raw[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    first, last = min(names, key=lambda k: header[k]["data_offsets"][0]), names[-1]
    recipe = os.path.join(tmp, "hostile.toml")
    write_recipe(recipe, os.path.join(tmp, "hostile_run"), "llama", False, data, {"model.n_kv_heads": 2})

    def attempt(label, files, *words):
        d = tempfile.mkdtemp(prefix="hostile_", dir=tmp)
        if "config.json" not in files:
            shutil.copy(os.path.join(src, "config.json"), d)
        for fname, content in files.items():
            open(os.path.join(d, fname), "wb" if isinstance(content, bytes) else "w").write(content)
        rc, out = run([trainer, "train", recipe, "--set", f'checkpoint.init_from="{d}"', "--set", "training.steps=1",
                       "--set", f'run.dir="{d}/run"'])
        ok = rc == 4 and all(w in out for w in words) and "error" in out
        check(ok, f"hostile model directory: {label}: exit {rc}, naming {', '.join(words)}")
        if not ok:
            print(out[-1500:])

    def tampered(edit):
        h = json.loads(json.dumps(header))
        edit(h)
        text = json.dumps(h).encode()
        return struct.pack("<Q", len(text)) + text + body

    def offsets(name, b, e):
        return lambda h: h[name].update(data_offsets=[b, e])

    size = len(body)
    for label, edit, words in (
            ("data_offsets near 2^64 (the end wraps when added to the header)",
             offsets(last, 2 ** 64 - 1 - 4 * math.prod(header[last]["shape"]), 2 ** 64 - 1), [last]),
            ("data_offsets beyond the file", offsets(first, size, size + 4 * math.prod(header[first]["shape"])),
             [first]),
            ("a fractional offset", offsets(first, 0.5, 4.5), [first, "non-negative integers"]),
            ("a negative offset", offsets(first, -4, 0), [first]),
            ("two tensors overlapping", offsets(last, 0, 4 * math.prod(header[last]["shape"])), ["overlap"]),
            ("a shape whose product overflows", lambda h: h[first].update(shape=[2 ** 40, 2 ** 40]), [first]),
            ("a negative dimension", lambda h: h[first].update(shape=[-1, 4]), [first]),
            ("a tensor entry that is a string", lambda h: h.update({first: "x"}), [first]),
            ("a missing data_offsets", lambda h: h[first].pop("data_offsets"), [first, "data_offsets"]),
            ("a string dtype of the wrong type", lambda h: h[first].update(dtype=7), [first, "dtype"])):
        attempt(label, {"model.safetensors": tampered(edit)}, "model.safetensors", *words)
    for label, wmap, words in (
            ("weight_map naming /etc/passwd", {first: "/etc/passwd"}, ["/etc/passwd"]),
            ("weight_map naming ../x", {first: "../" + os.path.basename(src) + "/model.safetensors"}, [".."]),
            ("weight_map not an object", ["model.safetensors"], ["weight_map"]),
            ("weight_map naming a number", {first: 3}, [first])):
        files = {"shard.safetensors": raw, "model.safetensors.index.json": json.dumps({"weight_map": wmap})}
        attempt(label, files, "model.safetensors.index.json", *words)
    config = json.load(open(os.path.join(src, "config.json")))
    for key, value in (("hidden_size", "32"), ("tie_word_embeddings", "yes"), ("model_type", 5),
                       ("num_key_value_heads", [2]), ("rope_theta", "big"), ("hidden_act", 1)):
        attempt(f"config.json {key} = {json.dumps(value)}", {"config.json": json.dumps(dict(config, **{key: value})),
                                                                "model.safetensors": raw},
                "config.json", key, "expected")
    d = tempfile.mkdtemp(prefix="hostile_", dir=tmp)
    os.makedirs(os.path.join(d, "config.json"))
    shutil.copy(os.path.join(src, "model.safetensors"), d)
    rc, out = run([trainer, "train", recipe, "--set", f'checkpoint.init_from="{d}"', "--set", f'run.dir="{d}/run"'])
    check(rc == 4 and "config.json" in out, f"hostile model directory: config.json is a directory: exit {rc}")


main()
