#!/usr/bin/python3
"""Parity with PyTorch: the trainer (via parity_dump) and tests/reference/
torch_model.py start from the same weights and batch; their loss, every
gradient, and the weights after 3 AdamW steps with clipping must agree.
The reference runs in float64, so the bounds measure the trainer's fp32 error.

Bounds: loss 1e-5 relative; each gradient tensor 1e-4 relative to its own
largest element (floored at 1e-3 of the largest gradient anywhere: GPT-2's
key bias has an exactly-zero true gradient, where any implementation returns
rounding noise); weights after 3 AdamW steps within 0.1 * lr absolute. Adam
divides by sqrt(v), so an element whose gradient is at rounding-noise level
moves by up to lr in a direction set by that noise: one step's largest move
is lr, and agreement to a tenth of it (typically 1e-3 of it) is the test.

llama3 (Llama 3.1's RoPE scaling) also requires the loss to differ clearly
(more than 100x the bound) from the same model's loss with plain RoPE, so
that the scaling is shown to matter.

llama and llama3 are also run by transformers itself (LlamaForCausalLM of
the pinned release, in float64, eager attention, the same weights): its
logits give the reference loss and its gradients the reference gradients,
held to the same bounds. transformers computes the Llama 3 frequencies with
its own code (_compute_llama3_parameters), not ours.

usage: parity_check.py PARITY_DUMP_BINARY gpt2|llama|llama3
"""
import os
import subprocess
import sys
import tempfile

import h5py
import torch

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # torch_model.py
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))  # harness.py
import torch_model  # noqa: E402
from harness import under_pyref  # noqa: E402

# The Llama models are run by transformers too (the pinned release, in
# scripts/setup.sh test's venv: this script re-runs itself there).
if len(sys.argv) > 2 and sys.argv[2] != "gpt2":
    (transformers,) = under_pyref(["transformers"])

LOSS_RTOL, GRAD_RTOL, WEIGHT_ATOL_LR = 1e-5, 1e-4, 0.1


def rel_err(got, want, floor):
    """max |got - want| / max |want|: relative to the tensor's scale."""
    return ((got - want).abs().max() / max(want.abs().max().item(), floor)).item()


# The trainer's parameter names -> transformers' LlamaForCausalLM names.
def hf_llama_name(name):
    if name == "embed.tok":
        return "model.embed_tokens.weight"
    if name == "final_norm.weight":
        return "model.norm.weight"
    if name == "lm_head.weight":
        return name
    _, l, rest = name.split(".", 2)
    return f"model.layers.{l}." + {"attn_norm.weight": "input_layernorm.weight", "attn.wq": "self_attn.q_proj.weight",
                                   "attn.wk": "self_attn.k_proj.weight", "attn.wv": "self_attn.v_proj.weight",
                                   "attn.wo": "self_attn.o_proj.weight", "mlp_norm.weight": "post_attention_layernorm.weight",
                                   "mlp.w_gate": "mlp.gate_proj.weight", "mlp.w_up": "mlp.up_proj.weight",
                                   "mlp.w_down": "mlp.down_proj.weight"}[rest]


def transformers_checks(arch, cfg, f, names, inputs, targets, failures):
    """The trainer's loss and gradients against transformers' own Llama in float64."""
    scaling = None
    if cfg["rope_llama3"] is not None:
        factor, low, high, original = cfg["rope_llama3"]
        scaling = dict(rope_type="llama3", factor=factor, low_freq_factor=low, high_freq_factor=high,
                       original_max_position_embeddings=int(original))
    hc = transformers.LlamaConfig(vocab_size=cfg["vocab_size"], hidden_size=cfg["d_model"],
                                  intermediate_size=cfg["d_ff"], num_hidden_layers=cfg["n_layers"],
                                  num_attention_heads=cfg["n_heads"], num_key_value_heads=cfg["n_kv_heads"],
                                  max_position_embeddings=cfg["seq_len"], rms_norm_eps=cfg["norm_eps"],
                                  rope_theta=cfg["rope_theta"], rope_scaling=scaling,
                                  tie_word_embeddings=cfg["tie_embeddings"], attn_implementation="eager")
    model = transformers.LlamaForCausalLM(hc).double()
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            params[hf_llama_name(n)].copy_(torch.tensor(f["init"][n][()], dtype=torch.float64))
    logits = model(input_ids=inputs).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    got = float(f["loss"][()])
    e = abs(got - loss.item()) / loss.item()
    print(f"{arch}: loss trainer {got:.8f} transformers {transformers.__version__} {loss.item():.8f} rel err {e:.2e}")
    if e > LOSS_RTOL:
        failures.append(f"loss against transformers: rel err {e:.2e} > {LOSS_RTOL}")
    floor = 1e-3 * max(p.grad.abs().max().item() for p in params.values())
    worst = 0.0
    for n in names:
        e = rel_err(torch.tensor(f["grad"][n][()], dtype=torch.float64), params[hf_llama_name(n)].grad, floor)
        worst = max(worst, e)
        if e > GRAD_RTOL:
            failures.append(f"grad {n} against transformers: rel err {e:.2e} > {GRAD_RTOL}")
    print(f"{arch}: worst gradient rel err against transformers {worst:.2e} over {len(names)} tensors")


def main():
    dump, arch = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "parity.h5")
        subprocess.run([dump, arch, path], check=True)
        f = h5py.File(path, "r")
        c = f["config"][()]
        cfg = dict(arch="llama" if c[0] else "gpt2", vocab_size=int(c[1]), d_model=int(c[2]),
                   n_layers=int(c[3]), n_heads=int(c[4]), n_kv_heads=int(c[5]), d_ff=int(c[6]),
                   seq_len=int(c[7]), tie_embeddings=bool(c[8]),
                   norm_eps=float(f["norm_eps"][()]), rope_theta=float(f["rope_theta"][()]),
                   rope_llama3=tuple(f["rope_llama3"][()].tolist()) if "rope_llama3" in f else None)
        names = list(torch_model.param_shapes(cfg))
        assert sorted(names) == sorted(f["init"].keys()), "parameter names differ"
        P = {n: torch.tensor(f["init"][n][()], dtype=torch.float64, requires_grad=True) for n in names}
        inputs = torch.tensor(f["inputs"][()], dtype=torch.long)
        targets = torch.tensor(f["targets"][()], dtype=torch.long)

        failures = []
        loss = torch_model.loss_fn(cfg, P, inputs, targets)
        loss.backward()
        e = abs(float(f["loss"][()]) - loss.item()) / loss.item()
        print(f"{arch}: loss trainer {float(f['loss'][()]):.8f} torch {loss.item():.8f} rel err {e:.2e}")
        if e > LOSS_RTOL:
            failures.append(f"loss rel err {e:.2e} > {LOSS_RTOL}")
        if cfg["rope_llama3"] is not None:
            with torch.no_grad():
                plain = torch_model.loss_fn(dict(cfg, rope_llama3=None), P, inputs, targets).item()
            moved = abs(plain - loss.item()) / loss.item()
            print(f"{arch}: plain RoPE loss {plain:.8f}: the scaling moves the loss by {moved:.2e} relative")
            if moved < 100 * LOSS_RTOL:
                failures.append(f"the scaling moves the loss by only {moved:.2e}: not shown to matter")
        if cfg["arch"] == "llama":
            transformers_checks(arch, cfg, f, names, inputs, targets, failures)
        worst = 0.0
        floor = 1e-3 * max(P[n].grad.abs().max().item() for n in names)
        for n in names:
            e = rel_err(torch.tensor(f["grad"][n][()], dtype=torch.float64), P[n].grad, floor)
            worst = max(worst, e)
            if e > GRAD_RTOL:
                failures.append(f"grad {n}: rel err {e:.2e} > {GRAD_RTOL}")
        print(f"{arch}: worst gradient rel err {worst:.2e} over {len(names)} tensors")

        lr, clip = float(f["lr"][()]), float(f["grad_clip"][()])
        for p in P.values():
            p.grad = None
        opt = torch_model.adamw(P, lr)
        for _ in range(3):
            opt.zero_grad()
            torch_model.loss_fn(cfg, P, inputs, targets).backward()
            torch.nn.utils.clip_grad_norm_(list(P.values()), clip)
            opt.step()
        worst, close, total = 0.0, 0, 0
        for n in names:
            d = (torch.tensor(f["after3"][n][()], dtype=torch.float64) - P[n].detach()).abs()
            worst = max(worst, d.max().item())
            close += (d <= 1e-3 * lr).sum().item()
            total += d.numel()
            if d.max().item() > WEIGHT_ATOL_LR * lr:
                failures.append(f"weights after 3 AdamW steps {n}: max abs diff {d.max().item():.2e} > {WEIGHT_ATOL_LR} * lr")
        print(f"{arch}: weights after 3 AdamW steps: max abs diff {worst:.2e} = {worst / lr:.3f} lr; "
              f"{close}/{total} within 1e-3 lr")
    for msg in failures:
        print("FAIL:", msg)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
