#!/usr/bin/env bash
# Attention benchmark: the GPT-2 124M shape in one process at T = 256, 1024
# and 2048, this tree against the attention that kept the T x T
# probabilities (BEFORE, a git revision; built into build_before/), in the
# same run: median step time and peak activation memory, and what
# `trainer plan` predicts for this tree.
#   THREADS=2 STEPS=2 scripts/bench_attention.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
before=${BEFORE:-3a05109}  # the last commit with stored probabilities
threads=${THREADS:-$(nproc)}
steps=${STEPS:-2}
if [[ ! -x build_before/trainer ]]; then
  rm -rf build_before_src
  git worktree add -f build_before_src "$before" >/dev/null
  cmake -S build_before_src -B build_before -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
  cmake --build build_before -j "$(nproc)" --target trainer >/dev/null
  git worktree remove --force build_before_src
fi
rows=()
for T in 256 1024 2048; do
  mb=$(( T == 256 ? 4 : 1 ))
  sets=(--set model.seq_len=$T --set training.micro_batch=$mb --set training.global_batch=$mb --set "runtime.threads=$threads")
  # before and after alternate, so a slow spell of a shared machine hits both
  b=$(build_before/trainer bench configs/gpt2_124m.toml "${sets[@]}" --steps "$steps" | grep '^{')
  a=$(build/trainer bench configs/gpt2_124m.toml "${sets[@]}" --steps "$steps" | grep '^{')
  p=$(build/trainer plan configs/gpt2_124m.toml "${sets[@]}" --ranks 1 | awk '$1 == "0" && $2 == "none*" {print $6}')
  rows+=("$T $mb $b $a $p")
done
/usr/bin/python3 - "${rows[@]}" <<'PY'
import json, sys
print(f"{'T':>5} {'batch':>5} {'step ms before':>15} {'after':>8} {'after/before':>13} {'act MB before':>14} {'after':>8} {'planned':>8}")
for row in sys.argv[1:]:
    T, mb, rest = row.split(" ", 2)
    b_json, rest = rest.split("} ", 1)
    a_json, planned = rest.rsplit("} ", 1)
    b, a = json.loads(b_json + "}"), json.loads(a_json + "}")
    print(f"{T:>5} {mb:>5} {b['median_step_ms']:15.0f} {a['median_step_ms']:8.0f} {a['median_step_ms'] / b['median_step_ms']:12.2f}x "
          f"{b['activations_mb']:14.1f} {a['activations_mb']:8.1f} {float(planned):8.1f}")
PY
