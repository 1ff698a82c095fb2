#!/usr/bin/env bash
# Throughput benchmark: the trainer against PyTorch (Debian's python3-torch,
# same model, same thread count, same OpenBLAS kernels) in the same run, for
# the demo model and a GPT-2 124M-shaped model at T=256 (micro-batch 4 and 8). Prints tokens/s, the
# ratio, and MFU relative to the sgemm peak measured in the same process.
# Each side reports its fastest timed step (a shared machine only adds delay).
#   THREADS=2 STEPS=3 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
scripts/build.sh >/dev/null
threads=${THREADS:-$(nproc)}
steps=${STEPS:-3}
# The trainer re-executes itself with OPENBLAS_CORETYPE when OpenBLAS falls
# back to generic kernels; give PyTorch (same libopenblas) the same kernels.
core=$(TRAINER_NO_REEXEC=1 build/trainer bench --blas-core)
[[ -n "$core" && -z "${OPENBLAS_CORETYPE:-}" ]] && export OPENBLAS_CORETYPE=$core
echo "bench: $threads thread(s), $steps timed step(s) each, OpenBLAS kernels ${OPENBLAS_CORETYPE:-as detected}"

run() {  # name recipe overrides...
  local name=$1 recipe=$2; shift 2
  local sets=(--set "runtime.threads=$threads")
  for s in "$@"; do sets+=(--set "$s"); done
  local ours theirs
  ours=$(build/trainer bench "$recipe" "${sets[@]}" --steps "$steps" | tail -1)
  theirs=$(/usr/bin/python3 scripts/bench_torch.py "$recipe" "${sets[@]}" --steps "$steps" | tail -1)
  /usr/bin/python3 - "$name" "$ours" "$theirs" <<'PY'
import json, sys
name, a, b = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
flops = a["model_gflops"] / a["tokens_per_s"]  # GFLOP per token
print(f"{name}: trainer {a['tokens_per_s']:.0f} tok/s ({a['step_ms']:.0f} ms/step), "
      f"PyTorch {b['tokens_per_s']:.0f} tok/s ({b['step_ms']:.0f} ms/step): ratio {a['tokens_per_s'] / b['tokens_per_s']:.2f}x")
print(f"{name}: sgemm peak {a['sgemm_gflops']:.0f} GFLOP/s; MFU trainer {100 * a['mfu']:.1f}%, "
      f"PyTorch {100 * flops * b['tokens_per_s'] / a['sgemm_gflops']:.1f}% of that peak")
PY
}

run "demo (gpt2 2.7M, T=128, B=4)" configs/demo.toml
run "gpt2-124M (T=256, B=4)" configs/gpt2_124m.toml model.seq_len=256 training.micro_batch=4
run "gpt2-124M (T=256, B=8)" configs/gpt2_124m.toml model.seq_len=256 training.micro_batch=8
