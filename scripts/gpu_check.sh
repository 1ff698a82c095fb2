#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine, as one prepared script that ends
# in under 8 minutes on one H200 and prints one summary table:
#   ops         every backend operation on both backends (build/tests/test_cuda)
#   parity      two training steps on the GPU against the CPU backend, for the
#               demo's shape and GPT-2 124M's, in fp32 and bf16
#   determinism the same GPU run twice: bitwise-equal losses
#   resume      resumed from a mid-run checkpoint: bitwise-equal losses
#   mpi path    4 ranks on the one GPU (NCCL refuses that; the staged MPI
#               path carries the collectives): losses match one rank
#   plan        the cost model with the GPU's own calibration: trainer
#               calibrate, then trainer smoke of the same recipe, predicted
#               against measured step time and memory
#   throughput  trainer bench of GPT-2 124M and configs/llama_162m.toml at
#               T = 1024 in bf16, and the same models in PyTorch (bf16
#               autocast, SDPA, fused AdamW; eager and torch.compile) timed in
#               the same call
# Without a GPU it runs what needs none (data, the CPU references) and stops
# at the first GPU step, saying why (exit 77). Run it from the repository
# root after a build, or from an unpacked scripts/bundle.sh archive (which
# sets the library paths). Logs go to $GPU_CHECK_OUT (default /tmp/gpu_check).
# GPU_CHECK_COMPILE=0 leaves out torch.compile (the slowest part).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -f bundle_env.sh ]] && . ./bundle_env.sh
. scripts/mpi_env.sh 2>/dev/null || true
T=${TRAINER:-build/trainer}
OUT=${GPU_CHECK_OUT:-/tmp/gpu_check}
PY=${PYTHON:-python3}
rm -rf "$OUT" && mkdir -p "$OUT"
start=$(date +%s)
rows=()
failed=0
row() {  # name, PASS|FAIL|SKIP, detail
  rows+=("$(printf '%-12s %-5s %s' "$1" "$2" "$3")")
  [[ $2 == FAIL ]] && failed=1
  echo "[gpu_check $(( $(date +%s) - start ))s] $1: $2 $3"
}
summary() {
  echo
  echo "== gpu_check summary ($(( $(date +%s) - start )) s) =="
  printf '%s\n' "${rows[@]}"
}

# --- what needs no GPU -------------------------------------------------------
$T --version | tee "$OUT/version.txt"
$T data prepare --input docs README.md configs scripts --output "$OUT/data" --val-fraction 0.1 >"$OUT/data.log" 2>&1 ||
  { row data FAIL "trainer data prepare (see $OUT/data.log)"; summary; exit 1; }

common=(--set "data.train=[\"$OUT/data/train_*.bin\"]" --set "data.val=[\"$OUT/data/val_*.bin\"]"
        --set parallel.tp=1 --set parallel.pp=1 --set parallel.sequence_parallel=false
        --set checkpoint.every=0 --set training.log_every=1 --set training.eval_every=0
        --set optimizer.warmup_steps=0 --set runtime.memory_check=false --set checkpoint.resume=none)
demo=(configs/demo.toml "${common[@]}")
gpt2=(configs/gpt2_124m.toml "${common[@]}" --set training.global_batch=1 --set training.micro_batch=1)

# train NAME BACKEND RECIPE-ARGS...: runs `trainer train`, losses to $OUT/NAME.loss
train() {
  local name=$1 backend=$2
  shift 2
  $T train "$@" --set runtime.backend="$backend" --set run.dir="$OUT/$name" \
    --set checkpoint.dir="$OUT/$name/ckpt" >"$OUT/$name.log" 2>&1 || return 1
  losses "$OUT/$name/metrics.jsonl" >"$OUT/$name.loss"
}

# losses METRICS: "step loss" per training step (the loss as logged, 9 digits)
losses() {
  $PY -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and "step" in r:
        print(r["step"], repr(r["loss"]))' "$1"
}

# compare A B RTOL: worst relative loss difference over the common steps
compare() {
  $PY - "$OUT/$1.loss" "$OUT/$2.loss" "$3" <<'PY'
import sys
a = dict(l.split() for l in open(sys.argv[1]))
b = dict(l.split() for l in open(sys.argv[2]))
steps = sorted(set(a) & set(b), key=int)
if not steps:
    print("no common steps"); sys.exit(1)
worst = max(abs(float(a[s]) - float(b[s])) / abs(float(b[s])) for s in steps)
print(f"worst rel loss diff {worst:.2e} over {len(steps)} steps")
sys.exit(0 if worst <= float(sys.argv[3]) else 1)
PY
}

threads=$(nproc)
for p in fp32 bf16; do
  train cpu_demo_$p cpu "${demo[@]}" --set training.steps=2 --set training.precision=$p --set runtime.threads=$threads ||
    row "cpu ref" FAIL "demo $p on the CPU (see $OUT/cpu_demo_$p.log)"
  train cpu_gpt2_$p cpu "${gpt2[@]}" --set training.steps=2 --set training.precision=$p --set runtime.threads=$threads ||
    row "cpu ref" FAIL "GPT-2 124M $p on the CPU (see $OUT/cpu_gpt2_$p.log)"
done
row "cpu ref" PASS "2-step CPU references of the demo and GPT-2 124M shapes, fp32 and bf16"

why=$($T train "${demo[@]}" --set training.steps=1 --set runtime.backend=cuda --set run.dir="$OUT/probe" 2>&1 >/dev/null |
      grep -m1 'runtime.backend = "cuda"')
if [[ -n $why ]]; then
  row gpu SKIP "${why#error: }"
  summary
  echo "gpu_check: stopped where the GPU is needed (exit 77)"
  exit 77
fi

# --- on the GPU ----------------------------------------------------------------
if build/tests/test_cuda --gtest_brief=1 >"$OUT/ops.log" 2>&1; then
  row ops PASS "$(grep -E '^\[  PASSED' "$OUT/ops.log" | head -1)"
else
  row ops FAIL "$(grep -E 'FAILED  \]' "$OUT/ops.log" | head -3 | tr '\n' ' ') (see $OUT/ops.log)"
fi

for p in fp32 bf16; do
  tol=$([[ $p == fp32 ]] && echo 1e-3 || echo 2e-2)
  for m in demo gpt2; do
    if [[ $m == demo ]]; then args=("${demo[@]}"); else args=("${gpt2[@]}"); fi
    if train gpu_${m}_$p cuda "${args[@]}" --set training.steps=2 --set training.precision=$p; then
      r=$(compare gpu_${m}_$p cpu_${m}_$p $tol) && row parity PASS "$m $p: $r (<= $tol)" || row parity FAIL "$m $p: $r"
    else
      row parity FAIL "$m $p did not run (see $OUT/gpu_${m}_$p.log)"
    fi
  done
done

det=("${demo[@]}" --set training.steps=12 --set training.precision=bf16)
if train det_a cuda "${det[@]}" && train det_b cuda "${det[@]}" && cmp -s "$OUT/det_a.loss" "$OUT/det_b.loss"; then
  row determinism PASS "12 bf16 steps twice: identical losses"
else
  row determinism FAIL "$(diff "$OUT/det_a.loss" "$OUT/det_b.loss" 2>&1 | head -2 | tr '\n' ' ')"
fi

res=("${demo[@]}" --set training.steps=12 --set training.precision=bf16 --set checkpoint.every=6)
if train res_full cuda "${res[@]}" &&
   train res_resumed cuda "${res[@]}" --resume "$OUT/res_full/ckpt/step_00000006" &&
   diff <(awk '$1 > 6' "$OUT/res_full.loss") <(awk '$1 > 6' "$OUT/res_resumed.loss") >/dev/null; then
  row resume PASS "steps 7-12 after resuming at 6 equal the uninterrupted run bit for bit"
else
  row resume FAIL "see $OUT/res_full.log, $OUT/res_resumed.log"
fi

mpi=(configs/demo.toml "${common[@]}" --set parallel.tp=2 --set parallel.pp=2 --set training.steps=4)
if mpirun -np 4 --oversubscribe $T train "${mpi[@]}" --set runtime.backend=cuda --set run.dir="$OUT/mpi4" \
     >"$OUT/mpi4.log" 2>&1 && train one4 cuda "${demo[@]}" --set training.steps=4; then
  losses "$OUT/mpi4/metrics.jsonl" >"$OUT/mpi4.loss"
  r=$(compare mpi4 one4 1e-4) && row "mpi path" PASS "4 ranks (tp 2 x pp 2) on one GPU vs 1 rank: $r" ||
    row "mpi path" FAIL "$r"
else
  row "mpi path" FAIL "see $OUT/mpi4.log"
fi

# Throughput at T = 1024, bf16. The vocabulary is padded to 50304 (a multiple
# of 128, as llm.c does) so the LM head's GEMMs are tensor-core aligned.
bench_pair() {  # label, recipe, micro-batch
  local label=$1 recipe=$2 mb=$3
  local set=(--set training.precision=bf16 --set training.micro_batch=$mb --set model.seq_len=1024)
  [[ $label == gpt2 ]] && set+=(--set model.vocab_size=50304)
  if $T bench "$recipe" "${set[@]}" --set runtime.backend=cuda --steps 10 --warmup 3 >"$OUT/bench_$label.log" 2>&1; then
    local j
    j=$(tail -1 "$OUT/bench_$label.log")
    local modes=eager
    [[ ${GPU_CHECK_COMPILE:-1} == 1 ]] && modes=eager,compile
    $PY scripts/bench_torch_gpu.py "$recipe" "${set[@]}" --modes $modes >"$OUT/torch_$label.log" 2>&1
    row throughput INFO "$($PY - "$j" "$OUT/torch_$label.log" "$label" <<'PY'
import json, sys
t = json.loads(sys.argv[1])
out = [f"{sys.argv[3]}: trainer {t['tokens_per_s']:.0f} tok/s, MFU {100 * t['mfu']:.1f}% ({t.get('peak_source', '')})"]
for line in open(sys.argv[2]):
    try:
        p = json.loads(line)
    except ValueError:
        continue
    if "tokens_per_s" in p:
        out.append(f"{p['impl']} {p['tokens_per_s']:.0f} tok/s (trainer {t['tokens_per_s'] / p['tokens_per_s']:.2f}x)")
    elif "error" in p:
        out.append(f"{p['impl']}: {p['error'][:80]}")
print("; ".join(out))
PY
)"
  else
    row throughput FAIL "$label: trainer bench failed (see $OUT/bench_$label.log)"
  fi
}
# The cost model on the GPU: its own profile, then a few real steps against it.
plan_set=(--set 'runtime.backend="cuda"' --set 'training.precision="bf16"' --set model.seq_len=1024
          --set model.vocab_size=50304 --set training.global_batch=32 --set training.micro_batch=8)
if $T calibrate configs/gpt2_124m.toml "${plan_set[@]}" --ranks 1 --output "$OUT/gpu_profile.json" \
     >"$OUT/calibrate.log" 2>&1 &&
   $T smoke configs/gpt2_124m.toml "${plan_set[@]}" --synthetic --steps 8 --profile "$OUT/gpu_profile.json" \
     --json "$OUT/smoke.json" >"$OUT/smoke.log" 2>&1; then
  row plan INFO "$($PY -c 'import json,sys; j=json.load(open(sys.argv[1])); m=j["measured"]; p=j["predicted"]; t=j["memory"]["total"]; print(f"GPT-2 124M bf16 mb 8: measured {m[\"step_ms\"]:.1f} ms vs predicted {p[\"step_ms\"]:.1f} ms, memory {t[\"measured_mb\"]:.0f} vs plan {t[\"plan_mb\"]:.0f} MB, MFU {100*m[\"mfu\"]:.1f}%")' "$OUT/smoke.json")"
else
  row plan FAIL "calibrate or smoke failed (see $OUT/calibrate.log, $OUT/smoke.log)"
fi

bench_pair gpt2 configs/gpt2_124m.toml 16
bench_pair llama configs/llama_162m.toml 16

summary
exit $failed
