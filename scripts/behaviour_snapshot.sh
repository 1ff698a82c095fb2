#!/usr/bin/env bash
# What a refactoring must leave unchanged, written down by one binary so that
# two binaries (before and after) can be compared file by file
# (scripts/behaviour_compare.sh):
#   - plan: the memory tables of demo and long_context (ring, a2a, CUDA,
#     2x2x2, Llama bf16) and plan --search's table and --json for both at 8
#     ranks, priced from one profile;
#   - train: 50 demo steps in six layouts (one process GPT-2 and Llama,
#     2x2x2 both, dp 2 x cp 2 ring and a2a with ZeRO-1), their metrics and
#     final checkpoints.
# usage: scripts/behaviour_snapshot.sh BINARY OUTDIR [PROFILE.json] [--plan-only]
#   PROFILE: a calibration of configs/demo.toml at 8 ranks; without one it is
#   made with BINARY into OUTDIR/demo.prof.json (13 s here). Give the first
#   snapshot's profile to the second: a plan is only comparable from the same.
# About 4 minutes on 2 cores (the plans alone: 10 s).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,16p' "$0"; exit 2; }
B=$(realpath "$1"); O=$(realpath -m "$2"); P=${3:-}; ONLY=${4:-}
[ "$P" = "--plan-only" ] && { ONLY=$P; P=; }
[ -n "$P" ] && P=$(realpath "$P")
cd "$(dirname "$0")/.."
. scripts/mpi_env.sh
mkdir -p "$O"
if [ -z "$P" ]; then
  P=$O/demo.prof.json
  mpirun -np 2 --oversubscribe "$B" calibrate configs/demo.toml --ranks 8 --output "$P" > "$O/calibrate.log" 2>&1
fi
plan() { local out=$1; shift; "$B" plan "$@" --memory-per-rank-gb 4 > "$O/$out" 2>&1 || true; }
for cfg in demo long_context; do
  plan "plan_$cfg.txt" "configs/$cfg.toml"
  plan "plan_${cfg}_cuda.txt" "configs/$cfg.toml" --set 'runtime.backend="cuda"'
  plan "search_$cfg.txt" "configs/$cfg.toml" --ranks 8 --search --profile "$P" --top 1000000 --json "$O/search_$cfg.json"
done
plan plan_long_context_a2a.txt configs/long_context.toml --set 'parallel.cp_comm="a2a"'
plan plan_demo_2x2x2.txt configs/demo.toml --ranks 8 --set parallel.tp=2 --set parallel.pp=2 --set parallel.sequence_parallel=true
plan plan_demo_llama_bf16.txt configs/demo.toml --ranks 4 --set 'model.arch="llama"' --set 'training.precision="bf16"' --set parallel.tp=2
[ "$ONLY" = "--plan-only" ] && exit 0

D=$O/data
[ -d "$D" ] || "$B" data prepare --input /usr/share/common-licenses --output "$D" > "$O/prepare.log" 2>&1
train() {
  local name=$1 np=$2; shift 2
  rm -rf "${O:?}/$name"
  mpirun -np "$np" --oversubscribe "$B" train configs/demo.toml --set training.steps=50 --set checkpoint.every=50 \
    --set "run.dir=\"$O/$name\"" --set "data.train=[\"$D/train_*.bin\"]" --set "data.val=[\"$D/val_*.bin\"]" \
    "$@" > "$O/$name.log" 2>&1 || echo "$name: the run failed ($O/$name.log)"
}
train one 1 --set parallel.tp=1 --set parallel.pp=1
train llama 1 --set parallel.tp=1 --set parallel.pp=1 --set 'model.arch="llama"'
train eight 8
train eight_llama 8 --set 'model.arch="llama"'
train cp_ring 4 --set parallel.tp=1 --set parallel.pp=1 --set parallel.cp=2 --set parallel.zero_stage=1
train cp_a2a 4 --set parallel.tp=1 --set parallel.pp=1 --set parallel.cp=2 --set 'parallel.cp_comm="a2a"' \
  --set parallel.zero_stage=1
