"""Mixture-of-Experts ([moe]) through the real binary, one process, on the
demo's byte-level text:

- a Llama with 4 routed experts a layer (2 a token) learns: its loss falls
  as the dense Llama's does over the same steps, and every step's record
  has the router's balancing and z-losses;
- stopped at a checkpoint and resumed, it continues bit-identical to the run
  that never stopped (the experts are saved and loaded by name);
- `trainer plan` counts it; what it cannot do yet or cannot do at all is
  refused with a message naming the key: tp without sequence parallelism,
  GPT-2, every layer dense, a shared expert tp cannot split, ZeRO-2, an ep
  the experts or the replicas do not divide by, ep without experts, a
  Hugging Face export.

The block against finite differences, routing, permutation and recompute
are in tests/unit/model/test_moe_*.cpp and tests/multirank/test_moe.cpp.

usage: moe_check.py TRAINER
"""
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing left under tests/ (__pycache__)
from harness import DEMO_RECIPE, check, failures, losses, run, small_demo

STEPS = 24
ONE = ["--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set", "parallel.sequence_parallel=false"]
LLAMA = ["--set", "model.arch=llama", "--set", "model.n_kv_heads=2", "--set", "model.tie_embeddings=false"]
MOE = ["--set", "moe.experts=4", "--set", "moe.top_k=2", "--set", "moe.expert_ffn=384",
       "--set", "moe.bias_rate=0.001"]  # (the selection bias is saved and resumed too)


def main():
    trainer = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        data, short = small_demo(trainer, tmp, STEPS)
        base = [trainer, "train", DEMO_RECIPE, *ONE, *LLAMA, *short, "--set", "checkpoint.every=12"]
        dirs = {}
        for name, extra in (("dense", []), ("moe", MOE)):
            dirs[name] = os.path.join(tmp, name)
            run(base + extra + ["--set", f"run.dir={dirs[name]}"])
        dense, moe = losses(dirs["dense"]), losses(dirs["moe"])
        check(moe[STEPS] < moe[1] - 1.0 and moe[STEPS] < dense[1] - 1.0,
              f"4 experts, 2 a token: loss {moe[1]:.3f} -> {moe[STEPS]:.3f} over {STEPS} steps "
              f"(dense Llama of the same width: {dense[1]:.3f} -> {dense[STEPS]:.3f})")

        # The router's losses, per step: balancing near aux_coeff a layer
        # (0.01 x 4 layers when the load is even), z-loss above 0.
        import json
        recs = [json.loads(line) for line in open(os.path.join(dirs["moe"], "metrics.jsonl"))]
        aux = [r["moe_aux_loss"] for r in recs if "moe_aux_loss" in r]
        z = [r["moe_z_loss"] for r in recs if "moe_z_loss" in r]
        check(len(aux) == len(z) == STEPS and all(0.02 < a < 0.2 for a in aux) and all(x > 0 for x in z),
              f"metrics: moe_aux_loss {aux[0]:.4f} -> {aux[-1]:.4f}, moe_z_loss {z[0]:.4f} -> {z[-1]:.4f} "
              f"over {len(aux)} records")
        # Per layer: the most and mean tokens an expert got (the mean: each
        # token's top_k pairs over the experts), nothing dropped, the layers'
        # losses adding up to the totals; the report charts the load.
        layers = 4
        per_layer = [r for r in recs if "moe_tokens_max" in r]
        tokens = 16 * 128  # the demo's global batch
        check(len(per_layer) == STEPS and all(
            len(r["moe_tokens_max"]) == len(r["moe_tokens_mean"]) == len(r["moe_dropped"]) == layers and
            all(abs(m - tokens * 2 / 4) < 1e-9 for m in r["moe_tokens_mean"]) and
            all(mx >= tokens * 2 / 4 for mx in r["moe_tokens_max"]) and r["moe_dropped"] == [0] * layers and
            abs(sum(r["moe_layer_aux_loss"]) - r["moe_aux_loss"]) < 1e-9 and
            abs(sum(r["moe_layer_z_loss"]) - r["moe_z_loss"]) < 1e-9 for r in per_layer),
              f"metrics per layer: tokens per expert max {per_layer[-1]['moe_tokens_max']}, mean "
              f"{per_layer[-1]['moe_tokens_mean'][0]:.0f}; dropped 0; layers' losses add up")
        # configs/moe_demo.toml (its figures: docs/PERFORMANCE.md) trains as
        # written: 4 ranks, the experts over ep 2.
        demo = os.path.join(os.path.dirname(DEMO_RECIPE), "moe_demo.toml")
        _, out = run(["mpirun", "-np", "4", trainer, "train", demo, "--set", f'data.train=["{data}/train_*.bin"]',
                      "--set", "data.val=[]", "--set", "training.steps=3", "--set", "training.eval_every=0",
                      "--set", f"run.dir={tmp}/moe_demo"])
        check("done: 3 steps" in out, "configs/moe_demo.toml trains (3 steps, 4 ranks, ep 2)")
        run([trainer, "report", dirs["moe"]])
        page = open(os.path.join(dirs["moe"], "report.html")).read()
        check('id="moe_load"' in page and "layer 3" in page, "the report charts each MoE layer's expert load")

        resumed = os.path.join(tmp, "moe_resumed")
        run(base + MOE + ["--set", f"run.dir={resumed}", "--set", "training.exit_after=12"])
        _, out = run(base + MOE + ["--set", f"run.dir={resumed}"])
        got = losses(resumed)
        check("at step 12" in out and all(got[s] == moe[s] for s in range(13, STEPS + 1)),
              f"stopped at step 12 and resumed: steps 13-{STEPS} bit-identical to the run that never stopped")

        # A checkpoint older than [moe] (its recipe without the section) is of
        # a dense model: resumed as one; made Mixture-of-Experts, refused.
        import re
        import shutil
        old = os.path.join(tmp, "old_dense")
        shutil.copytree(os.path.join(dirs["dense"], "checkpoints", "step_00000012"), old)
        text = open(os.path.join(old, "recipe.toml")).read()
        recipe = re.sub(r"\[moe\]\n(?:[^\[\n][^\n]*\n|\n)*", "", text).encode()
        open(os.path.join(old, "recipe.toml"), "wb").write(recipe)
        # ... and its manifest's record of it, and the manifest's own CRC-32.
        import zlib
        lines = [l for l in open(os.path.join(old, "manifest")).read().splitlines() if not l.startswith("crc ")]
        lines = [f"meta recipe.toml {len(recipe)} {zlib.crc32(recipe):08x}" if l.startswith("meta recipe.toml")
                 else l for l in lines]
        body = "".join(l + "\n" for l in lines[:-1])  # up to "end"
        open(os.path.join(old, "manifest"), "w").write(body + f"crc {zlib.crc32(body.encode()):08x}\nend\n")
        _, out = run(base + ["--set", f"run.dir={tmp}/old_resumed", "--resume", old])
        check("at step 12" in out and "[moe]" not in open(os.path.join(old, "recipe.toml")).read(),
              "a dense checkpoint from before [moe] resumes as a dense run")
        code, out = run(base + MOE + ["--set", f"run.dir={tmp}/old_moe", "--resume", old], ok_codes=(2,))
        check("moe.experts (absent) -> 4" in out, "... and is refused as a Mixture-of-Experts run (exit 2, "
                                                   "naming moe.experts)")

        _, out = run([trainer, "plan", DEMO_RECIPE, *ONE, *LLAMA, *MOE, "--ranks", "1"])
        check("params" in out and "activations" in out and "route each token to 2 of 4 experts" in out,
              "`trainer plan` plans a Mixture-of-Experts recipe and says what it holds of the experts")

        refusals = (
            ("tp without sequence parallelism", ["mpirun", "-np", "2", trainer, "train", DEMO_RECIPE, "--set",
                                                 "parallel.tp=2", "--set", "parallel.pp=1", "--set",
                                                 "parallel.sequence_parallel=false", *LLAMA, *MOE, *short, "--set",
                                                 f"run.dir={tmp}/r2"],
             "sequence_parallel"),
            ("gpt2", [trainer, "train", DEMO_RECIPE, *ONE, *MOE, *short, "--set", f"run.dir={tmp}/g"], "llama"),
            ("every layer dense", [trainer, "train", DEMO_RECIPE, *ONE, *LLAMA, *MOE, *short, "--set",
                                   "moe.dense_layers=6", "--set", f"run.dir={tmp}/d"], "dense_layers"),
            ("a shared expert tp cannot split", ["mpirun", "-np", "2", trainer, "train", DEMO_RECIPE, "--set",
                                                 "parallel.tp=2", "--set", "parallel.pp=1", *LLAMA, *MOE, *short,
                                                 "--set", "moe.shared_expert_ffn=33", "--set", f"run.dir={tmp}/s"],
             "shared_expert_ffn"),
            ("ZeRO-2", ["mpirun", "-np", "2", trainer, "train", DEMO_RECIPE, *ONE, *LLAMA, *MOE, *short, "--set",
                        "parallel.zero_stage=2", "--set", f"run.dir={tmp}/z"], "zero_stage"),
            ("an ep the experts do not divide by", ["mpirun", "-np", "3", trainer, "train", DEMO_RECIPE, *ONE, *LLAMA,
                                                    *MOE, *short, "--set", "parallel.ep=3", "--set",
                                                    f"run.dir={tmp}/e3"], "moe.experts"),
            ("ep without experts", [trainer, "train", DEMO_RECIPE, *ONE, *LLAMA, *short, "--set", "parallel.ep=2",
                                    "--set", f"run.dir={tmp}/e0"], "[moe] experts"),
            ("hf export", [trainer, "ckpt", "export", os.path.join(dirs["moe"], "checkpoints", "step_00000012"),
                           "--format", "hf", "--output", os.path.join(tmp, "hf")], "Mixture-of-Experts"),
        )
        for what, cmd, words in refusals:
            code, out = run(cmd, ok_codes=(1, 2, 3, 4, 5, 6, 7, 8))
            check(words in out,
                  f"{what}: refused (exit {code}) saying {words!r}: {out.strip().splitlines()[-1][:160]}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
