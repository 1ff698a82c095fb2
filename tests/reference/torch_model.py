"""An independent PyTorch implementation of the trainer's two architectures.

Written from the model's definition (GPT-2: LayerNorm, tanh-GELU, learned
positions, biases; Llama: RMSNorm, SwiGLU, rotate-half RoPE, grouped-query
attention, no biases), not from the C++ code. Parameters are plain tensors
keyed by the trainer's registry names, so weights written by the trainer to
HDF5 load by name. Used by the parity test and by the PyTorch benchmark.
"""
import math

import torch
import torch.nn.functional as F


def param_shapes(cfg):
    """Registry names and shapes, in the trainer's order."""
    d, hd = cfg["d_model"], cfg["d_model"] // cfg["n_heads"]
    H, KV, f, V = cfg["n_heads"], cfg["n_kv_heads"], cfg["d_ff"], cfg["vocab_size"]
    gpt2 = cfg["arch"] == "gpt2"
    shapes = {"embed.tok": (V, d)}
    if gpt2:
        shapes["embed.pos"] = (cfg["seq_len"], d)
    for l in range(cfg["n_layers"]):
        p = f"layers.{l}."
        shapes[p + "attn_norm.weight"] = (d,)
        if gpt2:
            shapes[p + "attn_norm.bias"] = (d,)
        shapes[p + "attn.wq"] = (H * hd, d)
        shapes[p + "attn.wk"] = (KV * hd, d)
        shapes[p + "attn.wv"] = (KV * hd, d)
        if gpt2:
            shapes[p + "attn.bq"] = (H * hd,)
            shapes[p + "attn.bk"] = (KV * hd,)
            shapes[p + "attn.bv"] = (KV * hd,)
        shapes[p + "attn.wo"] = (d, H * hd)
        if gpt2:
            shapes[p + "attn.bo"] = (d,)
        shapes[p + "mlp_norm.weight"] = (d,)
        if gpt2:
            shapes[p + "mlp_norm.bias"] = (d,)
            shapes[p + "mlp.w_fc"] = (f, d)
            shapes[p + "mlp.b_fc"] = (f,)
            shapes[p + "mlp.w_proj"] = (d, f)
            shapes[p + "mlp.b_proj"] = (d,)
        else:
            shapes[p + "mlp.w_gate"] = (f, d)
            shapes[p + "mlp.w_up"] = (f, d)
            shapes[p + "mlp.w_down"] = (d, f)
    shapes["final_norm.weight"] = (d,)
    if gpt2:
        shapes["final_norm.bias"] = (d,)
    if not cfg["tie_embeddings"]:
        shapes["lm_head.weight"] = (V, d)
    return shapes


def init_params(cfg, dtype=torch.float32, seed=0):
    """GPT-2 style initialisation (for benchmarks; the parity test loads weights)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            out[name] = torch.ones(shape, dtype=dtype) if name.endswith("norm.weight") else torch.zeros(shape, dtype=dtype)
        else:
            std = 0.02
            if name.endswith(("attn.wo", "mlp.w_proj", "mlp.w_down")):
                std /= math.sqrt(2 * cfg["n_layers"])
            out[name] = torch.randn(shape, generator=g, dtype=dtype) * std
    return out


def _llama3_inv_freq(inv, factor, low_freq_factor, high_freq_factor, original):
    """Llama 3.1's scaled frequencies, as transformers' _compute_llama3_parameters
    computes them (masks over the whole vector)."""
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > original / low_freq_factor, inv / factor, inv)
    smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < original / high_freq_factor) & ~(wavelen > original / low_freq_factor)
    return torch.where(medium, smoothed, scaled)


def _rope(x, theta, llama3=None):
    # x: [B, heads, T, hd]; rotate-half convention; llama3: (factor, low, high, original) or None
    T, hd = x.shape[2], x.shape[3]
    half = hd // 2
    inv = theta ** (-torch.arange(0, half, dtype=torch.float64) * 2 / hd)
    if llama3 is not None:
        inv = _llama3_inv_freq(inv, *llama3)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def loss_fn(cfg, P, inputs, targets):
    """Mean cross-entropy of next-token prediction; inputs/targets [B, T] long."""
    gpt2 = cfg["arch"] == "gpt2"
    B, T = inputs.shape
    d, H, KV = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
    hd = d // H
    eps = cfg["norm_eps"]

    def norm(x, prefix):
        if gpt2:
            return F.layer_norm(x, (d,), P[prefix + ".weight"], P[prefix + ".bias"], eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * P[prefix + ".weight"]

    def linear(x, w, b=None):
        y = x @ P[w].t()
        return y + P[b] if b is not None else y

    x = P["embed.tok"][inputs]
    if gpt2:
        x = x + P["embed.pos"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg["n_layers"]):
        p = f"layers.{l}."
        h = norm(x, p + "attn_norm")
        q = linear(h, p + "attn.wq", p + "attn.bq" if gpt2 else None)
        k = linear(h, p + "attn.wk", p + "attn.bk" if gpt2 else None)
        v = linear(h, p + "attn.wv", p + "attn.bv" if gpt2 else None)
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, KV, hd).transpose(1, 2)
        v = v.view(B, T, KV, hd).transpose(1, 2)
        if not gpt2:
            scaling = cfg.get("rope_llama3")
            q, k = _rope(q, cfg["rope_theta"], scaling), _rope(k, cfg["rope_theta"], scaling)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(~mask, float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + linear(a, p + "attn.wo", p + "attn.bo" if gpt2 else None)
        h = norm(x, p + "mlp_norm")
        if gpt2:
            m = F.gelu(linear(h, p + "mlp.w_fc", p + "mlp.b_fc"), approximate="tanh")
            x = x + linear(m, p + "mlp.w_proj", p + "mlp.b_proj")
        else:
            m = F.silu(linear(h, p + "mlp.w_gate")) * linear(h, p + "mlp.w_up")
            x = x + linear(m, p + "mlp.w_down")
    x = norm(x, "final_norm")
    head = P["embed.tok"] if cfg["tie_embeddings"] else P["lm_head.weight"]
    logits = x @ head.t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def adamw(cfg_params, lr, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8):
    """AdamW with decay on matrices and embeddings only."""
    decay = [p for p in cfg_params.values() if p.dim() >= 2]
    no_decay = [p for p in cfg_params.values() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=betas, eps=eps)
