#!/usr/bin/env bash
# Recomputation benchmark: GPT-2 124M shape (T=256, micro-batch 4) on CPU,
# one process, for each recompute mode: step time, peak activation memory
# (measured by the trainer's memory accounting) and what `trainer plan`
# predicted, relative to mode "none". The modes run in three interleaved rounds
# and each keeps its fastest step: the machine is shared and noisy. The step's
# process CPU time is shown too: it measures the work done even when the host
# takes cores away.
#   THREADS=2 STEPS=2 scripts/bench_recompute.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
threads=${THREADS:-$(nproc)}
steps=${STEPS:-2}
sets=(--set model.seq_len=256 --set training.micro_batch=4 --set training.global_batch=4 --set "runtime.threads=$threads")
printf "%-10s %10s %10s %12s %10s %16s %16s\n" recompute "step ms" "vs none" "step CPU ms" "vs none" "activations MB" "planned MB"
declare -A best json
for round in 1 2 3; do
  for mode in none selective full; do
    out=$(build/trainer bench configs/gpt2_124m.toml "${sets[@]}" --set "recompute.mode=$mode" --steps "$steps" | tail -1)
    ms=$(/usr/bin/python3 -c "import json,sys; print(json.loads(sys.argv[1])['step_ms'])" "$out")
    if [[ -z "${best[$mode]:-}" ]] || /usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$ms" "${best[$mode]}"; then
      best[$mode]=$ms
      json[$mode]=$out
    fi
  done
done
for mode in none selective full; do
  planned=$(build/trainer plan configs/gpt2_124m.toml "${sets[@]}" --set "recompute.mode=$mode" --ranks 1 |
            awk -v m="$mode" '$2 == m || $2 == m"*" {print $6}')
  /usr/bin/python3 - "$mode" "${json[$mode]}" "$planned" "${json[none]}" <<'PY'
import json, sys
mode, r, planned, base = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
print(f"{mode:<10} {r['step_ms']:10.0f} {r['step_ms'] / base['step_ms']:9.2f}x {r['step_cpu_ms']:12.0f} "
      f"{r['step_cpu_ms'] / base['step_cpu_ms']:9.2f}x {r['activations_mb']:16.1f} {planned:16.1f}")
PY
done
