#!/usr/bin/env bash
# `trainer bench` tokens/s of the CPU kernel sets (runtime.cpu_kernels) this
# CPU runs, and optionally of another trainer binary (OTHER=path: e.g. a build
# of the previous release), taken in turns so that a shared machine's drift
# hits each alike. Prints every round, then each one's median and its ratio to
# the first; figures are comparable within one run only.
#   ROUNDS=8 STEPS=60 OTHER=/tmp/old/trainer scripts/bench_kernel_sets.sh [RECIPE] [--set k=v ...]
set -euo pipefail
cd "$(dirname "$0")/.."
recipe=${1:-configs/demo.toml}
[[ $# -gt 0 ]] && shift
rounds=${ROUNDS:-6}
steps=${STEPS:-60}
sets=$(build/trainer --version | sed -n 's/^cpu kernels: .*this CPU runs \([^;]*\);.*/\1/p' | tr -d ',')
who=()
[[ -n "${OTHER:-}" ]] && who+=("other")
for s in $sets; do who+=("$s"); done
echo "bench_kernel_sets: $recipe, $rounds rounds of $steps steps; ${who[*]}"
for r in $(seq "$rounds"); do
  for w in "${who[@]}"; do
    if [[ $w == other ]]; then cmd=("$OTHER" bench "$recipe")
    else cmd=(build/trainer bench "$recipe" --set "runtime.cpu_kernels=$w"); fi
    tps=$("${cmd[@]}" "$@" --steps "$steps" 2>/dev/null | tail -1 |
          /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["tokens_per_s"])')
    echo "$w $tps"
  done
done | tee /dev/stderr | /usr/bin/python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    w, t = line.split()
    runs.setdefault(w, []).append(float(t))
first = statistics.median(next(iter(runs.values())))
for w, ts in runs.items():
    m = statistics.median(ts)
    print(f"{w:8s} median {m:8.0f} tokens/s  ({min(ts):.0f}-{max(ts):.0f})  ratio to the first {m / first:.3f}")'
