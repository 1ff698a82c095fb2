#!/usr/bin/env bash
# The demo (or any recipe) trained twice on 8 ranks (2x2x2), in fp32 and in
# bf16, then compared: the loss at every logged step (relative difference)
# and every validation loss. Issue 12's bound: rtol 0.05 on the curve, 3% on
# the final validation loss.
#   scripts/compare_precision.sh [RECIPE] [--set K=V ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
. scripts/mpi_env.sh
recipe=${1:-configs/demo.toml}
shift || true
if ! compgen -G "datasets/demo/train_*.bin" >/dev/null; then
  build/trainer data prepare --input /usr/share/common-licenses --output datasets/demo --val-fraction 0.1
fi
tmp=$(mktemp -d /tmp/precision.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for p in fp32 bf16; do
  start=$(date +%s)
  mpirun -np "${RANKS:-8}" build/trainer train "$recipe" --set "run.dir=$tmp/$p" --set "training.precision=$p" \
    --set checkpoint.every=0 "$@" >/dev/null
  echo "$p: $(( $(date +%s) - start )) s"
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
runs = {p: [json.loads(l) for l in open(f"{sys.argv[1]}/{p}/metrics.jsonl")] for p in ("fp32", "bf16")}
loss = {p: {r["step"]: r["loss"] for r in rs} for p, rs in runs.items()}
val = {p: [(r["step"], r["val_loss"]) for r in rs if "val_loss" in r] for p, rs in runs.items()}
steps = sorted(loss["fp32"])
worst = max(steps, key=lambda s: abs(loss["bf16"][s] - loss["fp32"][s]) / loss["fp32"][s])
rel = lambda a, b: (b - a) / a
print(f"loss at {len(steps)} logged steps: worst relative difference {abs(rel(loss['fp32'][worst], loss['bf16'][worst])):.4f} "
      f"at step {worst}; last step {steps[-1]}: fp32 {loss['fp32'][steps[-1]]:.4f}, bf16 {loss['bf16'][steps[-1]]:.4f}")
for (s, a), (_, b) in zip(val["fp32"], val["bf16"]):
    print(f"val loss step {s}: fp32 {a:.4f}, bf16 {b:.4f} ({100 * rel(a, b):+.2f}%)")
PY
