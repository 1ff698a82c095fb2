#!/usr/bin/env bash
# Precision benchmark: `trainer bench` in fp32 and in bf16 (training.precision),
# alternating ROUNDS times in one run, on the demo model and on the GPT-2 124M
# shape (T=256, micro-batch 4): median step time, bf16 / fp32, and the peak
# activation memory measured by the trainer's accounting against `trainer
# plan`. The CPU backend computes bf16 in fp32 (widening and rounding around
# every kernel), so bf16 costs time here and saves memory; on a GPU it is
# what makes the products fast.
#   THREADS=2 STEPS=3 ROUNDS=2 scripts/bench_precision.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
threads=${THREADS:-$(nproc)}
steps=${STEPS:-3}
rounds=${ROUNDS:-2}
declare -A sets=(
  [demo]="configs/demo.toml --set parallel.tp=1 --set parallel.pp=1 --set parallel.sequence_parallel=false"
  [gpt2_124m_T256_B4]="configs/gpt2_124m.toml --set model.seq_len=256 --set training.micro_batch=4 --set training.global_batch=4"
)
results=""
for name in demo gpt2_124m_T256_B4; do
  for ((r = 0; r < rounds; r++)); do
    for p in fp32 bf16; do
      # shellcheck disable=SC2086
      line=$(build/trainer bench ${sets[$name]} --set "runtime.threads=$threads" --set "training.precision=$p" \
             --steps "$steps" | grep '^{')
      # shellcheck disable=SC2086
      planned=$(build/trainer plan ${sets[$name]} --set "runtime.threads=$threads" --set "training.precision=$p" \
                --ranks 1 | awk '$1 == "0" && $2 ~ /\*$/ {print $6}')
      results+="$name $p $planned $line"$'\n'
    done
  done
done
/usr/bin/python3 - "$results" <<'PY'
import json, statistics, sys
rows = {}
for line in sys.argv[1].strip().splitlines():
    name, p, planned, rec = line.split(" ", 3)
    r = rows.setdefault((name, p), {"ms": [], "act": 0, "planned": float(planned)})
    j = json.loads(rec)
    r["ms"].append(j["median_step_ms"])
    r["act"] = j["activations_mb"]
print(f"{'model':<20} {'precision':<9} {'median step ms':>15} {'vs fp32':>8} {'activations MB':>15} {'planned MB':>11}")
for (name, p), r in rows.items():
    ms = statistics.median(r["ms"])
    base = statistics.median(rows[(name, "fp32")]["ms"])
    print(f"{name:<20} {p:<9} {ms:15.1f} {ms / base:7.2f}x {r['act']:15.1f} {r['planned']:11.1f}")
PY
