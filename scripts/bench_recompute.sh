#!/usr/bin/env bash
# Recomputation benchmark: GPT-2 124M shape (T=256, micro-batch 4) on CPU in
# one process holding one model per recompute mode, steps taken round-robin
# (so the shared machine's slow spells hit every mode alike): median step
# time and process CPU time relative to mode "none", the peak activation
# memory measured by the trainer's accounting, and what `trainer plan`
# predicted.
#   THREADS=2 STEPS=4 scripts/bench_recompute.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
threads=${THREADS:-$(nproc)}
steps=${STEPS:-4}
sets=(--set model.seq_len=256 --set training.micro_batch=4 --set training.global_batch=4 --set "runtime.threads=$threads")
out=$(build/trainer bench configs/gpt2_124m.toml "${sets[@]}" --steps "$steps" --compare-recompute | grep '^{')
plan=$(build/trainer plan configs/gpt2_124m.toml "${sets[@]}" --ranks 1)
/usr/bin/python3 - "$out" "$plan" <<'PY'
import json, sys
runs = [json.loads(l) for l in sys.argv[1].splitlines()]
planned = {}
for line in sys.argv[2].splitlines():
    f = line.split()
    if len(f) > 6 and f[0] == "0":
        planned[f[1].rstrip("*")] = float(f[5])
base = runs[0]
print(f"{'recompute':<10} {'median step ms':>15} {'vs none':>8} {'CPU ms':>8} {'vs none':>8} {'activations MB':>15} {'planned MB':>11}")
for r in runs:
    print(f"{r['recompute']:<10} {r['median_step_ms']:15.0f} {r['median_step_ms'] / base['median_step_ms']:7.2f}x "
          f"{r['median_step_cpu_ms']:8.0f} {r['median_step_cpu_ms'] / base['median_step_cpu_ms']:7.2f}x "
          f"{r['activations_mb']:15.1f} {planned[r['recompute']]:11.1f}")
PY
