#!/usr/bin/env bash
# Context parallelism on this machine (issue 48): a small Llama (2 layers,
# d_model 128, 4 heads sharing 2 kv heads) on sequences of T tokens (default
# 16384), one sequence a step, trained STEPS steps on the demo's data as cp 1
# (one rank) and as cp 2 and cp 4 (ring attention), each cp > 1 twice: the
# ring's transfers overlapped with its attention, and waited for first
# (parallel.cp_overlap = false: the ring's whole communication time, the
# same bits). Per run, from rank 0's metrics.jsonl, medians over the steps
# after the first: the step time, the ring's exposed transfer time, the
# attention-work imbalance across the cp group; and the peak activation
# memory against cp 1's and against what `trainer plan` predicted.
#   T=16384 STEPS=4 scripts/bench_context_parallel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
. scripts/mpi_env.sh
if ! compgen -G "datasets/demo/train_*.bin" >/dev/null; then
  build/trainer data prepare --input /usr/share/common-licenses --output datasets/demo --val-fraction 0.1 >/dev/null
fi
T=${T:-16384}
steps=${STEPS:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sets=(--set 'model.arch="llama"' --set model.n_layers=2 --set model.d_model=128 --set model.n_heads=4
      --set model.n_kv_heads=2 --set model.d_ff=352 --set model.tie_embeddings=false --set "model.seq_len=$T"
      --set training.micro_batch=1 --set training.global_batch=1 --set "training.steps=$steps"
      --set training.log_every=1 --set training.eval_every=0 --set 'data.val=[]' --set checkpoint.every=0
      --set parallel.tp=1 --set parallel.pp=1 --set runtime.threads=1)
runs=()
for cp in 1 2 4; do
  for overlap in true false; do
    [[ $cp == 1 && $overlap == false ]] && continue
    dir="$tmp/cp${cp}_$overlap"
    mpirun -np "$cp" build/trainer train configs/demo.toml "${sets[@]}" --set "parallel.cp=$cp" \
      --set "parallel.cp_overlap=$overlap" --set "run.dir=\"$dir\"" >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
    plan=$(build/trainer plan configs/demo.toml "${sets[@]}" --set "parallel.cp=$cp" --ranks "$cp" |
           awk '$1 == "0" && $2 ~ /^none/ {print $6}')
    runs+=("$cp $overlap $dir/metrics.jsonl $plan")
  done
done
/usr/bin/python3 - "$T" "${runs[@]}" <<'PY'
import json, statistics, sys
T = int(sys.argv[1])
print(f"Llama 2 x d128 (4 heads, 2 kv heads), T = {T}, one sequence a step; rank 0's medians after step 1")
print(f"{'cp':>3} {'overlap':>8} {'step ms':>9} {'ring exposed ms':>16} {'imbalance':>10} "
      f"{'activations MB':>15} {'vs cp 1':>8} {'planned MB':>11} {'plan err':>9}")
base = None
for arg in sys.argv[2:]:
    cp, overlap, path, planned = arg.split()
    recs = [r for r in map(json.loads, open(path)) if "loss" in r]
    later = [r for r in recs if r["step"] > 1] or recs
    med = lambda k: statistics.median(r.get(k, 0.0) for r in later)
    act = recs[-1]["mem_peak_activations_mb"]
    base = base or act
    planned = float(planned)
    print(f"{cp:>3} {overlap:>8} {med('step_ms'):9.0f} {med('comm_cp_exposed_ms'):16.1f} "
          f"{med('cp_imbalance'):10.3f} {act:15.1f} {act / base:8.3f} {planned:11.1f} "
          f"{100 * (planned - act) / act:+8.1f}%")
PY
