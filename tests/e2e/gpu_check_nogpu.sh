#!/usr/bin/env bash
# ctest gpu_check_nogpu: scripts/gpu_check.sh on a machine without a GPU must
# run its environment checks, stop at the first GPU step with exit 77, print
# its summary table, and leave at most 8 files with exactly one tarball (which
# holds the summary, the op tests' gtest JSON and the ldd report) in $OUT, well
# under a minute. This is what keeps the lent GPU run's packaging honest in CI.
# Where a GPU IS present the full check belongs to a lent run, not to ctest:
# exit 77 (ctest's SKIP_RETURN_CODE) without running it.
# usage: gpu_check_nogpu.sh REPO_ROOT TRAINER TEST_CUDA
set -uo pipefail
root=$1 trainer=$2 test_cuda=$3
if command -v nvidia-smi >/dev/null && grep -q '^GPU' <<<"$(nvidia-smi -L 2>/dev/null)"; then
  echo "gpu_check_nogpu: a GPU is here; run scripts/gpu_check.sh itself (not under ctest): skipped"
  exit 77
fi
out=$(mktemp -d) log=$(mktemp)
trap 'rm -rf "$out" "$log"' EXIT
t0=$SECONDS
TRAINER=$trainer TEST_CUDA=$test_cuda OUT=$out "$root/scripts/gpu_check.sh" >"$log" 2>&1
rc=$?
took=$((SECONDS - t0))
cat "$log"
fail() { echo "gpu_check_nogpu: FAIL: $*"; exit 1; }
((rc == 77)) || fail "scripts/gpu_check.sh exited $rc, not 77 (no GPU here): see its table above"
grep -q '^== gpu_check: exit 77' "$log" || fail "no summary table ('== gpu_check: exit 77 ...') in its output"
grep -qE '^ops +SKIP .*no GPU' "$log" || fail "the table has no 'ops SKIP ... no GPU' row"
grep -qE '^binaries +PASS' "$log" || fail "the table has no 'binaries PASS' row (ldd or trainer --version)"
n=$(find "$out" -type f | wc -l)
((n <= 8)) || fail "$n files in \$OUT; the device tool brings back at most 8"
tars=("$out"/*.tar.gz)
((${#tars[@]} == 1)) && [[ -f ${tars[0]} ]] || fail "want exactly one tarball in \$OUT, found: $(ls "$out")"
listing=$(tar tzf "${tars[0]}") || fail "${tars[0]} is not a readable tar.gz"
for f in summary.txt gtest/ops.json env/ldd.txt env/version.txt logs/ops.log; do
  grep -q "/$f\$" <<<"$listing" || fail "the tarball lacks $f"
done
((took < 60)) || fail "took $took s; it must stop well under a minute without a GPU"
echo "gpu_check_nogpu: PASS: exit 77 in $took s, table printed, $n files in \$OUT ($(ls "$out" | tr '\n' ' '))"
