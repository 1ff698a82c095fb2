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

usage: parity_check.py PARITY_DUMP_BINARY gpt2|llama|llama3
"""
import os
import subprocess
import sys
import tempfile

import h5py
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import torch_model  # noqa: E402

LOSS_RTOL, GRAD_RTOL, WEIGHT_ATOL_LR = 1e-5, 1e-4, 0.1


def rel_err(got, want, floor):
    """max |got - want| / max |want|: relative to the tensor's scale."""
    return ((got - want).abs().max() / max(want.abs().max().item(), floor)).item()


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
