#!/usr/bin/env python3
"""PyTorch peer for `trainer bench` on a GPU, timed in the same call by
scripts/gpu_check.sh: the recipe's model written the way a PyTorch user would
(fused q|k|v projection, F.scaled_dot_product_attention with is_causal, bf16
autocast, fused AdamW), trained on one micro-batch of random tokens, eager and
under torch.compile. Prints one JSON line per mode, with the fields trainer
bench prints (tokens_per_s, step_ms).

usage: bench_torch_gpu.py RECIPE.toml [--set section.key=value ...] [--steps N] [--warmup N]
                          [--modes eager,compile]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import load  # noqa: E402  (the recipe, as the CPU peer reads it)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, self.H, self.KV = c["d_model"], c["n_heads"], c["n_kv_heads"]
        self.hd, self.gpt2 = d // self.H, c["arch"] == "gpt2"
        self.theta = c["rope_theta"]
        norm = (lambda: nn.LayerNorm(d, eps=c["norm_eps"])) if self.gpt2 else (lambda: nn.RMSNorm(d, eps=c["norm_eps"]))
        self.n1, self.n2 = norm(), norm()
        self.qkv = nn.Linear(d, (self.H + 2 * self.KV) * self.hd, bias=self.gpt2)
        self.wo = nn.Linear(self.H * self.hd, d, bias=self.gpt2)
        f = c["d_ff"]
        self.fc = nn.Linear(d, f if self.gpt2 else 2 * f, bias=self.gpt2)
        self.proj = nn.Linear(f, d, bias=self.gpt2)

    def rope(self, x):
        T, half = x.shape[2], self.hd // 2
        inv = self.theta ** (-torch.arange(0, half, device=x.device, dtype=torch.float32) * 2 / self.hd)
        ang = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.H * self.hd, self.KV * self.hd, self.KV * self.hd], dim=-1)
        q = q.view(B, T, self.H, self.hd).transpose(1, 2)
        k = k.view(B, T, self.KV, self.hd).transpose(1, 2)
        v = v.view(B, T, self.KV, self.hd).transpose(1, 2)
        if not self.gpt2:
            q, k = self.rope(q), self.rope(k)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.KV != self.H)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, -1))
        h = self.fc(self.n2(x))
        if self.gpt2:
            h = F.gelu(h, approximate="tanh")
        else:
            g, u = h.chunk(2, dim=-1)
            h = F.silu(g) * u
        return x + self.proj(h)


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.tok = nn.Embedding(c["vocab_size"], d)
        self.pos = nn.Embedding(c["seq_len"], d) if c["arch"] == "gpt2" else None
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
        self.norm = nn.LayerNorm(d, eps=c["norm_eps"]) if c["arch"] == "gpt2" else nn.RMSNorm(d, eps=c["norm_eps"])
        self.head = nn.Linear(d, c["vocab_size"], bias=False)
        if c["tie_embeddings"]:
            self.head.weight = self.tok.weight
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / (math.sqrt(2 * c["n_layers"]) if n.endswith(("wo.weight", "proj.weight")) else 1)
                nn.init.normal_(p, std=std)

    def forward(self, idx, targets):
        x = self.tok(idx)
        if self.pos is not None:
            x = x + self.pos.weight[: idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def run(cfg, B, clip, lr, mode, steps, warmup):
    torch.manual_seed(0)
    model = Model(cfg).cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if mode == "compile" else model
    T = cfg["seq_len"]
    tok = torch.randint(0, cfg["vocab_size"], (B, T + 1), device="cuda")
    inputs, targets = tok[:, :-1], tok[:, 1:]
    best, total = float("inf"), 0.0
    for s in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if s >= warmup:
            total += dt
            best = min(best, dt)
    return {"impl": f"pytorch {torch.__version__} {mode}", "params": sum(p.numel() for p in model.parameters()),
            "step_ms": 1e3 * best, "mean_step_ms": 1e3 * total / steps, "tokens_per_s": B * T / best,
            "loss": loss.item(), "peak_memory_mb": torch.cuda.max_memory_allocated() / 2**20}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="eager,compile")
    a = ap.parse_args()
    cfg, B, _threads, clip, lr = load(a.recipe, a.set)
    torch.backends.cuda.matmul.allow_tf32 = False
    for mode in a.modes.split(","):
        try:
            rec = run(cfg, B, clip, lr, mode, a.steps, a.warmup)
        except Exception as e:  # a failed mode is reported, the others still run
            rec = {"impl": f"pytorch {mode}", "error": f"{type(e).__name__}: {e}"[:300]}
        rec["bench"] = a.recipe
        print(json.dumps(rec), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
