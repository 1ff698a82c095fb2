#!/usr/bin/env bash
# Compares two snapshots of scripts/behaviour_snapshot.sh: every plan output
# byte for byte; each training run's losses, gradient norms, learning rates
# and validation losses at the steps both logged (a throughput warning may
# log one more step in one of them); its final checkpoint's files with
# h5diff. Prints one line per item and exits 1 when any differs.
# usage: scripts/behaviour_compare.sh BEFORE AFTER
set -uo pipefail
[ $# -eq 2 ] || { sed -n '2,7p' "$0"; exit 2; }
A=$1; B=$2; bad=0
say() { echo "$1 $2"; [ "$1" = same ] || bad=1; }
for f in $(cd "$A" && ls ./*.txt ./*.json 2>/dev/null | grep -v prof.json); do
  f=${f#./}
  if [ ! -f "$B/$f" ]; then say MISSING "$f"; elif cmp -s "$A/$f" "$B/$f"; then say same "$f"; else say DIFFERS "$f"; fi
done
for r in one llama eight eight_llama cp_ring cp_a2a; do
  [ -f "$A/$r/metrics.jsonl" ] || continue
  [ -f "$B/$r/metrics.jsonl" ] || { say MISSING "$r/metrics.jsonl"; continue; }
  verdict=$(python3 - "$A/$r/metrics.jsonl" "$B/$r/metrics.jsonl" <<'PY'
import json, sys
keys = ("loss", "val_loss", "grad_norm", "lr")
def rows(path):
    out = {}
    for line in open(path):
        d = json.loads(line)
        if "step" in d and any(k in d for k in keys):
            out[d["step"]] = {k: d[k] for k in keys if k in d}
    return out
a, b = rows(sys.argv[1]), rows(sys.argv[2])
common = sorted(set(a) & set(b))
differ = [s for s in common if a[s] != b[s]]
print(("DIFFERS" if differ or not common else "same"), f"at steps {common}" + (f", differing at {differ}" if differ else ""))
PY
)
  say "${verdict%% *}" "$r metrics ${verdict#* }"
  for step in $(cd "$A/$r/checkpoints" 2>/dev/null && ls -d step_* 2>/dev/null); do
    for h in $(cd "$A/$r/checkpoints/$step" && ls ./*.h5); do
      h=${h#./}
      if h5diff -q "$A/$r/checkpoints/$step/$h" "$B/$r/checkpoints/$step/$h" > /dev/null 2>&1; then
        say same "$r/$step/$h"
      else
        say DIFFERS "$r/$step/$h"
      fi
    done
  done
done
exit $bad
