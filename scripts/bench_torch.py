#!/usr/bin/python3
"""PyTorch peer for `trainer bench`: trains the recipe's model (the reference
implementation in tests/reference/torch_model.py) on one micro-batch of random
tokens with the same thread count, and prints the same JSON fields.

usage: bench_torch.py RECIPE.toml [--set section.key=value ...] [--steps N] [--warmup N]
Run it with the same OPENBLAS_CORETYPE as the trainer (scripts/bench.sh does),
since Debian's PyTorch does its matrix products through the same OpenBLAS.
"""
import argparse
import json
import os
import sys
import time
import tomllib

import torch

sys.dont_write_bytecode = True  # no __pycache__ left under tests/reference/
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torch_model  # noqa: E402


def load(path, overrides):
    with open(path, "rb") as f:
        r = tomllib.load(f)
    for o in overrides:
        key, val = o.split("=", 1)
        sec, k = key.split(".", 1)
        try:
            v = tomllib.loads("v = " + val)["v"]
        except tomllib.TOMLDecodeError:
            v = val
        r.setdefault(sec, {})[k] = v
    m = r["model"]
    arch = m.get("arch", "gpt2")
    cfg = dict(arch=arch, vocab_size=m.get("vocab_size", 256), d_model=m.get("d_model", 128),
               n_layers=m.get("n_layers", 4), n_heads=m.get("n_heads", 4),
               seq_len=m.get("seq_len", 128), tie_embeddings=m.get("tie_embeddings", arch == "gpt2"),
               norm_eps=m.get("norm_eps", 1e-5 if arch == "gpt2" else 1e-6),
               rope_theta=m.get("rope_theta", 10000.0))
    cfg["n_kv_heads"] = m.get("n_kv_heads", cfg["n_heads"]) if arch == "llama" else cfg["n_heads"]
    cfg["d_ff"] = m.get("d_ff", 4 * cfg["d_model"])
    t = r.get("training", {})
    return cfg, t.get("micro_batch", 1), r.get("runtime", {}).get("threads", 1), \
        t.get("grad_clip", 1.0), r.get("optimizer", {}).get("lr", 3e-4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    cfg, B, threads, clip, lr = load(a.recipe, a.set)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    P = {n: t.requires_grad_() for n, t in torch_model.init_params(cfg).items()}
    opt = torch_model.adamw(P, lr)
    T = cfg["seq_len"]
    tok = torch.randint(0, cfg["vocab_size"], (B, T + 1))
    inputs, targets = tok[:, :-1], tok[:, 1:]
    total, best = 0.0, float("inf")
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = torch_model.loss_fn(cfg, P, inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), clip)
        opt.step()
        opt.zero_grad(set_to_none=False)
        if s >= a.warmup:
            total += time.perf_counter() - t0
            best = min(best, time.perf_counter() - t0)
    step_ms = 1e3 * best  # fastest step, as trainer bench reports

    print(json.dumps({"bench": a.recipe, "impl": "pytorch " + torch.__version__, "threads": threads,
                      "params": sum(p.numel() for p in P.values()), "step_ms": step_ms,
                      "mean_step_ms": 1e3 * total / a.steps,
                      "tokens_per_s": B * T / (step_ms / 1e3), "loss": loss.item()}))


if __name__ == "__main__":
    main()
