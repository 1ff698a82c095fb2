#!/usr/bin/env bash
# Pipeline bubble benchmark: trains a model large enough that compute
# dominates the messages on pp = 2 stages (one rank per core, 1 thread each)
# with 1F1B and interleaved (2 virtual stages) schedules for several
# micro-batch counts m, and prints the measured bubble share (1 - a stage's
# compute time / the pipeline's makespan, mean over stages and steps after
# the first) next to the textbook (p-1)/(m+p-1) and the interleaved
# (p-1)/(v*m+p-1).
#   STEPS=4 scripts/bench_pipeline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
. scripts/mpi_env.sh
steps=${STEPS:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A token shard of random bytes: the bubble does not depend on the text.
/usr/bin/python3 - "$tmp/data.bin" <<'PY'
import random, struct, sys
random.seed(0)
n = 2_000_000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(bytes(b for _ in range(n) for b in (random.randrange(256), 0)))
PY
P=2
printf "%-12s %4s %10s %10s %12s\n" schedule m measured textbook "step ms"
for sched in 1f1b interleaved; do
  v=1; [[ $sched == interleaved ]] && v=2
  for m in 2 4 8; do
    run="$tmp/run_${sched}_$m"
    mpirun -np $P --bind-to core build/trainer train configs/demo.toml \
      --set "data.train=[\"$tmp/data.bin\"]" --set "data.val=[]" --set "run.dir=$run" \
      --set model.d_model=512 --set model.n_heads=8 --set model.d_ff=2048 --set model.n_layers=8 \
      --set model.seq_len=256 --set parallel.tp=1 --set parallel.pp=$P --set parallel.dp=1 \
      --set parallel.sequence_parallel=false --set parallel.schedule=$sched --set parallel.virtual_stages=$v \
      --set training.micro_batch=1 --set training.global_batch=$m --set training.steps=$steps \
      --set training.eval_every=0 --set training.log_every=1 --set runtime.threads=1 \
      --set optimizer.warmup_steps=0 >/dev/null
    /usr/bin/python3 - "$run/metrics.jsonl" "$sched" "$m" "$P" "$v" <<'PY'
import json, sys
path, sched, m, p, v = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
recs = [json.loads(l) for l in open(path)][1:]  # the first step warms up
# Idle share of each stage over the pipeline's makespan (the longest stage's
# schedule): waiting on receives inside its schedule plus, for stages that
# finish early, the tail - the textbook's definition of the bubble.
share = [sum(1 - c / max(r["pp_span_ms"]) for c in r["pp_compute_ms"]) / len(r["pp_compute_ms"])
         for r in recs]
measured = sum(share) / len(share)
textbook = (p - 1) / (v * m + p - 1)
step_ms = sum(r["step_ms"] for r in recs) / len(recs)
print(f"{sched:<12} {m:4d} {100 * measured:9.1f}% {100 * textbook:9.1f}% {step_ms:12.0f}")
PY
  done
done
