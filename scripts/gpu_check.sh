#!/usr/bin/env bash
# The CUDA backend's check on a lent GPU machine, built for its limits (one
# command at most 10 minutes, 15 minutes of device time in all with the
# machine's start, at most 8 files back from $OUT): one prepared script, every
# step under `timeout` inside one global deadline, the summary table printed
# whatever happens, and everything it wrote packed as one tarball in $OUT
# (re-packed after every step, so that even a run killed from outside leaves
# its logs there).
#
#   scripts/gpu_check.sh            phase 1 (default deadline 300 s):
#     gpu          nvidia-smi -L (and the GPU's state, read only)
#     binaries     trainer --version runs; ldd of the trainer, the op tests,
#                  mpirun/orted (and, in a bundle, Open MPI's plugins): nothing
#                  "not found"
#     libraries    the CUDA runtime, cuBLASLt, cuDNN, NCCL versions the loaded
#                  libraries report (trainer --version) and the files ldd
#                  resolves them to; cuDNN's and NVRTC's dlopen'ed parts present
#     ops          build/tests/test_cuda (every backend op against the CPU
#                  backend) with CUDA_LAUNCH_BLOCKING=1 and --gtest_output=json
#     health       trainer health on the GPU: the product's speed and the
#                  driver's figures (NVML: the SM clock under load, ECC,
#                  throttling, the PCIe link) in its table, exit 0
#     memcheck     compute-sanitizer --tool memcheck of the custom-kernel tests
#     racecheck    compute-sanitizer --tool racecheck of the same, both
#                  time-boxed (Cuda/KernelOps/*:-*Large*:*Bf16*: tests/support/kernel_cases.h)
#     parity       2 training steps on the GPU against CPU references computed
#                  beforehand on another machine and carried here (demo and
#                  GPT-2 124M shapes, fp32 and bf16, on the same token data)
#     determinism  the same GPU run twice: bitwise-equal losses and grad norms
#     resume       resumed from a mid-run checkpoint: bitwise-equal losses
#     mpi path     4 ranks (tp 2 x pp 2) on the one GPU, whose collectives go
#                  through MPI (NCCL refuses two ranks on one GPU), against 1
#     cp a2a, cp ring  2 ranks of context parallelism (cp 2, the all-to-all
#                  in bf16, the ring in fp32 and bf16) on the one GPU against 1
#   scripts/gpu_check.sh --perf     phase 2 (default deadline 300 s):
#     throughput   trainer bench of GPT-2 124M and configs/llama_162m.toml at
#                  T = 1024, bf16, micro-batch 16, beside the same models in
#                  PyTorch (eager; --compile adds torch.compile) in the same
#                  call; first, since these are the figures docs/PERFORMANCE.md
#                  wants and calibrate alone takes a minute or two
#     torch        the PyTorch, CUDA, cuDNN, NCCL versions of the machine's python
#     calibrate    trainer calibrate: the GPU's own machine profile
#     smoke        trainer smoke of GPT-2 124M against that profile's prediction
#   scripts/gpu_check.sh --references DIR
#                  on a machine WITHOUT the GPU (never on the lent one): prepare
#                  the token data and compute the CPU references of the parity
#                  cases into DIR (about 1.5 minutes on 2 cores); scripts/bundle.sh
#                  does this and packs DIR as gpu_refs/
#
# Output: $OUT (the device tool's folder; a new temporary folder when unset)
# receives gpu_check.tar.gz and gpu_check_summary.txt (phase 2:
# gpu_check_perf.tar.gz and gpu_check_perf_summary.txt), nothing else: logs,
# gtest JSON, sanitizer reports, losses and the runs' metrics are written to a
# work folder elsewhere (removed at the end unless GPU_CHECK_KEEP=1) and packed.
# Exit: 0 every step passed (SKIP/INFO/PART allowed), 1 a step failed, timed out
# or was cut by the deadline, 2 usage error, 77 no GPU here: the steps that need
# none ran, and it stopped at the first that does (the table says why).
#
# Options and variables: --deadline S (or GPU_CHECK_DEADLINE) for the phase's
# deadline in seconds; --compile with --perf; GPU_CHECK_REFS (default gpu_refs,
# the bundle's) for the references; GPU_CHECK_SANITIZER_S (default 60), the
# most each sanitizer run may take; TRAINER, TEST_CUDA, PYTHON, MPIRUN for the
# programs (paths relative to the repository root); GPU_CHECK_BACKEND=cpu rehearses phase 1's training steps on the CPU
# backend on a machine without a GPU (it proves the script's own logic and the
# bundle's libraries, nothing about the GPU). Run it from the repository root
# after a build, or from an unpacked scripts/bundle.sh archive (it sources the
# archive's bundle_env.sh for the library paths).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
[[ -f bundle_env.sh ]] && . ./bundle_env.sh
[[ -f scripts/mpi_env.sh ]] && . scripts/mpi_env.sh

usage() { sed -n '2,/^set -uo/p' "$ROOT/scripts/gpu_check.sh" | sed '$d; s/^# \{0,1\}//'; }
PHASE=1 COMPILE=0 REF_DIR="" DEADLINE=${GPU_CHECK_DEADLINE:-}
while (($#)); do
  case $1 in
    --perf) PHASE=perf ;;
    --compile) COMPILE=1 ;;
    --deadline) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "gpu_check: --deadline needs seconds, e.g. --deadline 240" >&2; exit 2; }
                DEADLINE=$2; shift ;;
    --references) [[ -n ${2:-} ]] || { echo "gpu_check: --references needs a folder, e.g. --references build/gpu_refs" >&2; exit 2; }
                  PHASE=references REF_DIR=$2; shift ;;
    --print-cases) PHASE=print-cases ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (scripts/gpu_check.sh --help lists them)" >&2; exit 2 ;;
  esac
  shift
done
[[ -z $DEADLINE || $DEADLINE =~ ^[0-9]+$ ]] || { echo "gpu_check: GPU_CHECK_DEADLINE must be seconds, not '$DEADLINE'" >&2; exit 2; }
case $PHASE in
  1) DEADLINE=${DEADLINE:-300} NAME=gpu_check ;;
  perf) DEADLINE=${DEADLINE:-300} NAME=gpu_check_perf ;;
  references) DEADLINE=${DEADLINE:-1200} NAME=gpu_check_references ;;
esac

abspath() { [[ $1 == /* ]] && echo "$1" || echo "$ROOT/$1"; }
T=$(abspath "${TRAINER:-build/trainer}")
TC=$(abspath "${TEST_CUDA:-build/tests/test_cuda}")
PY=${PYTHON:-python3}
MPIRUN=${MPIRUN:-mpirun}
BACKEND=${GPU_CHECK_BACKEND:-cuda}
REFS=$(abspath "${GPU_CHECK_REFS:-gpu_refs}")
[[ $PHASE == references ]] && REFS=$(abspath "$REF_DIR") BACKEND=cpu
[[ $BACKEND == cuda || $BACKEND == cpu ]] || { echo "gpu_check: GPU_CHECK_BACKEND is cuda or cpu, not '$BACKEND'" >&2; exit 2; }
[[ $BACKEND == cpu && $PHASE == perf ]] && { echo "gpu_check: GPU_CHECK_BACKEND=cpu rehearses phase 1 only" >&2; exit 2; }
KERNEL_FILTER='Cuda/KernelOps/*:-*Large*:*Bf16*'

# The recipes of the training steps, shared by the references and the GPU:
# case_args CASE sets ARGS. Token data: $REFS/data, prepared with the references.
case_args() {
  local data=$REFS/data
  local common=(--set "data.train=[\"$data/train_*.bin\"]" --set "data.val=[\"$data/val_*.bin\"]"
                --set parallel.tp=1 --set parallel.pp=1 --set parallel.sequence_parallel=false
                --set checkpoint.every=0 --set training.log_every=1 --set training.eval_every=0
                --set training.eval_batches=1 --set optimizer.warmup_steps=0 --set runtime.memory_check=false
                --set checkpoint.resume=none)
  local gpt2=(configs/gpt2_124m.toml "${common[@]}" --set training.global_batch=1 --set training.micro_batch=1)
  case $1 in
    demo_fp32|demo_bf16) ARGS=(configs/demo.toml "${common[@]}" --set training.steps=2 --set "training.precision=${1#demo_}") ;;
    gpt2_fp32|gpt2_bf16) ARGS=("${gpt2[@]}" --set training.steps=2 --set "training.precision=${1#gpt2_}") ;;
    determinism) ARGS=(configs/demo.toml "${common[@]}" --set training.steps=12 --set training.precision=bf16) ;;
    resume) ARGS=(configs/demo.toml "${common[@]}" --set training.steps=12 --set training.precision=bf16
                  --set checkpoint.every=6) ;;
    mpi4) ARGS=(configs/demo.toml "${common[@]}" --set parallel.tp=2 --set parallel.pp=2 --set training.steps=4) ;;
    one4) ARGS=(configs/demo.toml "${common[@]}" --set training.steps=4) ;;
    one4_bf16) ARGS=(configs/demo.toml "${common[@]}" --set training.steps=4 --set training.precision=bf16) ;;
    # the all-to-all in bf16 (cuDNN's attention on whole sequences), the ring in
    # fp32 (our pair kernels) and bf16 (cuDNN per chunk pair, our merge)
    cp2_a2a) ARGS=(configs/demo.toml "${common[@]}" --set parallel.cp=2 --set 'parallel.cp_comm="a2a"'
                   --set training.steps=4 --set training.precision=bf16) ;;
    cp2_ring|cp2_ring_bf16) ARGS=(configs/demo.toml "${common[@]}" --set parallel.cp=2 --set 'parallel.cp_comm="ring"'
                                  --set training.steps=4)
                            [[ $1 == *bf16 ]] && ARGS+=(--set training.precision=bf16) ;;
    *) echo "gpu_check: no case '$1'" >&2; return 1 ;;
  esac
}
REF_CASES=(demo_fp32 demo_bf16 gpt2_fp32 gpt2_bf16)
DATA_INPUTS=(README.md docs/ARCHITECTURE.md docs/DATA.md docs/PERFORMANCE.md docs/RELIABILITY.md configs scripts)
if [[ $PHASE == print-cases ]]; then  # what the references depend on (scripts/bundle.sh compares it)
  REFS='$REFS'
  for c in "${REF_CASES[@]}"; do case_args "$c"; echo "$c: ${ARGS[*]}"; done
  echo "data: trainer data prepare --input ${DATA_INPUTS[*]} --val-fraction 0.1"
  exit 0
fi

# --- where things go -------------------------------------------------------------
if [[ $PHASE != references ]]; then
  if [[ -z ${OUT:-} ]]; then OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_out.XXXXXX") || exit 1; fi
  mkdir -p "$OUT" || { echo "gpu_check: cannot create the output folder OUT=$OUT" >&2; exit 1; }
  OUT=$(cd "$OUT" && pwd)
else
  OUT=$REFS
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_work.XXXXXX") || { echo "gpu_check: cannot make a work folder under ${TMPDIR:-/tmp}" >&2; exit 1; }
P=$W/$NAME  # what is packed
mkdir -p "$P"/{env,logs,gtest,sanitizer,losses,runs,perf}
TARBALL=$OUT/$NAME.tar.gz SUMMARY=$OUT/${NAME}_summary.txt
[[ $PHASE == references ]] && TARBALL="" SUMMARY=""

# What a VM needs, and the libraries' own logs into the packed folder.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_btl_tcp_if_include=${OMPI_MCA_btl_tcp_if_include:-lo}
export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-lo}
# (phase 2 keeps cuDNN's backend log to errors, to leave its timings alone)
CUDNN_LOGLEVEL_DBG=2
[[ $PHASE == perf ]] && CUDNN_LOGLEVEL_DBG=1
export CUDNN_FRONTEND_LOG_INFO=1 CUDNN_LOGLEVEL_DBG CUBLASLT_LOG_LEVEL=1
export CUBLASLT_LOG_FILE=$P/logs/cublaslt.%i.log
log_files_for() {  # STEP [RANK-SUFFIX]: per-step (and per-rank) cuDNN log files
  export CUDNN_FRONTEND_LOG_FILE=$P/logs/$1.cudnn_frontend$2.log CUDNN_LOGDEST_DBG=$P/logs/$1.cudnn$2.log
}
log_files_for start ""

# --- the table ---------------------------------------------------------------------
START=$SECONDS DEADLINE_AT=$((SECONDS + DEADLINE))
R_NAME=() R_STATUS=() R_TIME=() R_DETAIL=()
FAILED=0 GPU=0 STOP="" TIMED_OUT=0 STEP_END=0 LOG=/dev/null DETAIL=""
add_row() {  # NAME STATUS SECONDS DETAIL
  R_NAME+=("$1") R_STATUS+=("$2") R_TIME+=("$3") R_DETAIL+=("$4")
  [[ $2 == FAIL || $2 == TIME || $2 == CUT ]] && FAILED=1
  echo "[gpu_check $((SECONDS - START))s] $1: $2 $4"
}
table() {  # EXIT-CODE
  local i why=""
  case $1 in
    0) why="exit 0: every step passed" ;; 77) why="exit 77: no GPU here, stopped at the first step that needs one" ;;
    running) why="still running (this is the table so far)" ;;
    *) why="exit $1: a step failed, timed out or was cut by the deadline" ;;
  esac
  echo "== $NAME: $why; $((SECONDS - START)) s of a ${DEADLINE} s deadline =="
  printf '%-18s %-6s %5s  %s\n' step status time detail
  for i in "${!R_NAME[@]}"; do
    printf '%-18s %-6s %4ss  %s\n' "${R_NAME[$i]}" "${R_STATUS[$i]}" "${R_TIME[$i]}" "${R_DETAIL[$i]}"
  done
  [[ -n $TARBALL ]] && echo "logs: $TARBALL (unpack: tar xzf $(basename "$TARBALL"))"
  echo "status: PASS ok; FAIL failed; TIME stopped at its time limit; CUT not run, deadline reached;"
  echo "        SKIP not applicable here (the detail says why); INFO a measurement; PART time-boxed, not all run, no error seen"
}

# pack: the table and everything under $P, as one tarball in $OUT (atomically:
# written beside it, then renamed). Files over 2 MiB are cut to their first
# 0.5 MiB and last 1 MiB first when the tarball would pass 15 MiB.
pack() {
  [[ -z $TARBALL ]] && return 0
  local rc=$1
  table "$rc" >"$P/summary.txt"
  find "$P" -type f -empty -delete 2>/dev/null
  local _
  for _ in 1 2; do
    tar czf "$TARBALL.part" -C "$W" "$NAME" 2>"$W/tar.err" || { echo "gpu_check: could not write $TARBALL.part: $(head -1 "$W/tar.err")" >&2; return 1; }
    (($(stat -c %s "$TARBALL.part") < 15 * 1024 * 1024)) && break
    local f
    while IFS= read -r f; do
      { head -c 524288 "$f"; echo; echo "[... cut by gpu_check to fit the 16 MiB a file may bring back ...]"; tail -c 1048576 "$f"; } >"$f.cut" && mv -f "$f.cut" "$f"
    done < <(find "$P" -type f -size +2M)
  done
  mv -f "$TARBALL.part" "$TARBALL"
  cp "$P/summary.txt" "$SUMMARY"
}

on_exit() {
  local rc=$?
  trap - EXIT
  [[ -n $STOP ]] && rc=$STOP
  ((rc == 0 && FAILED)) && rc=1
  echo
  table "$rc"
  pack "$rc"
  if [[ ${GPU_CHECK_KEEP:-0} == 1 ]]; then echo "work folder kept: $W"; else rm -rf "$W"; fi
  [[ -n $TARBALL ]] && echo "in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# tmo CMD...: CMD under timeout with what is left of the step's limit
tmo() {
  local left=$((STEP_END - SECONDS))
  if ((left < 1)); then echo "gpu_check: no time left in this step for: $*"; TIMED_OUT=1; return 124; fi
  echo "+ [limit ${left}s] $*" >>"$LOG"
  timeout -k 5 "$left" "$@"
  local rc=$?
  if ((rc == 124 || (rc == 137 && SECONDS >= STEP_END))); then TIMED_OUT=1; echo "gpu_check: stopped at the step's time limit"; fi
  return $rc
}

# step NAME LIMIT FUNCTION [ARGS...]: runs FUNCTION (output to the step's log
# $LOG) within LIMIT seconds and the deadline; FUNCTION sets DETAIL and returns
# 0 PASS, 1 FAIL, 2 SKIP, 3 INFO, 4 PART, 77 SKIP for want of a GPU (stops here).
step() {
  local name=$1 limit=$2
  shift 2
  [[ -n $STOP ]] && return 0
  local left=$((DEADLINE_AT - SECONDS))
  if ((left < 5)); then
    add_row "$name" CUT 0 "not run: the ${DEADLINE} s deadline was reached (--deadline S gives more)"
    return 0
  fi
  ((limit > left)) && limit=$left
  local file=${name// /_}
  LOG=$P/logs/$file.log DETAIL="" TIMED_OUT=0 STEP_END=$((SECONDS + limit))
  log_files_for "$file" ""
  local t0=$SECONDS
  echo "[gpu_check $((SECONDS - START))s] $name (up to ${limit}s) ..."
  "$@" >>"$LOG" 2>&1
  local rc=$? status
  case $rc in
    0) status=PASS ;; 2) status=SKIP ;; 3) status=INFO ;; 4) status=PART ;;
    77) status=SKIP STOP=77 ;;
    *) status=FAIL ;;
  esac
  if [[ $status == FAIL ]] && ((TIMED_OUT)); then status=TIME DETAIL="stopped at its ${limit} s limit; ${DETAIL:-see the log}"; fi
  add_row "$name" "$status" $((SECONDS - t0)) "${DETAIL:-(no detail: see logs/$file.log)}"
  if [[ $status == FAIL || $status == TIME ]]; then
    echo "----- last 40 lines of logs/$file.log -----"
    tail -n 40 "$LOG"
    echo "----- end of logs/$file.log -----"
  fi
  pack running >/dev/null
  return 0
}

# --- helpers of the steps -----------------------------------------------------------
# train NAME ARGS...: trainer train ARGS on $BACKEND in $W/runs/NAME; losses
# ("step loss grad_norm" per step) to $P/losses/NAME.loss; the run's small
# files (metrics, crash reports, not checkpoints) copied into $P/runs/NAME.
train() {
  local name=$1
  shift
  local rd=$W/runs/$name threads=()
  [[ $BACKEND == cpu ]] && threads=(--set runtime.threads="$(nproc)")
  echo "=== train $name"
  tmo "$T" train "$@" --set runtime.backend="$BACKEND" "${threads[@]}" --set run.dir="$rd" --set checkpoint.dir="$rd/ckpt"
  local rc=$?
  keep_run "$name"
  ((rc == 0)) || { DETAIL="trainer train ($name) exited $rc: $(last_error)"; return 1; }
  losses "$rd/metrics.jsonl" >"$P/losses/$name.loss" || { DETAIL="no losses in $name's metrics.jsonl"; return 1; }
}
keep_run() {
  local rd=$W/runs/$1
  [[ -d $rd ]] || return 0
  (cd "$rd" && find . -path ./ckpt -prune -o -type f -size -4M -print) | while IFS= read -r f; do
    mkdir -p "$P/runs/$1/$(dirname "$f")" && cp "$rd/$f" "$P/runs/$1/$f"
  done
}
last_error() {  # the last line of the step's log that looks like an error
  grep -aiE 'error|fail|abort|what\(\)|terminate|signal|not found|exception' "$LOG" | grep -v '^+ ' | tail -1 | cut -c1-220
}
losses() {  # METRICS: "step loss grad_norm" per training step, as logged
  "$PY" - "$1" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and "step" in r:
        print(r["step"], repr(r["loss"]), repr(r.get("grad_norm")))
        n += 1
sys.exit(0 if n else 1)
PY
}
compare() {  # A.loss B.loss RTOL: worst relative loss difference over the common steps
  "$PY" - "$1" "$2" "$3" <<'PY'
import sys
def num(x):
    try:
        return float(x)
    except ValueError:  # no grad norm logged
        return float("nan")
def read(p):
    return {l.split()[0]: [num(x) for x in l.split()[1:3]] for l in open(p) if l.strip()}
a, b, tol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
steps = sorted(set(a) & set(b), key=int)
if not steps:
    print("no common steps"); sys.exit(1)
rel = lambda i: max(abs(a[s][i] - b[s][i]) / max(abs(b[s][i]), 1e-30) for s in steps)
loss, gn = rel(0), rel(1)
print(f"worst rel loss diff {loss:.2e} over {len(steps)} steps (<= {tol:g}), grad norm {gn:.2e}")
sys.exit(0 if loss <= tol else 1)
PY
}
gtest_summary() {  # JSON: "passed failed skipped total" then the failed tests' names
  "$PY" - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
p = f = s = 0; names = []
for suite in j.get("testsuites", []):
    for t in suite.get("testsuite", []):
        if t.get("result") == "SKIPPED": s += 1
        elif t.get("failures"): f += 1; names.append(f"{suite['name']}.{t['name']}")
        else: p += 1
print(p, f, s, p + f + s)
print(" ".join(names[:6]) + (" ..." if len(names) > 6 else ""))
PY
}
no_gpu_reason() {  # the reason a GPU step gave for having no GPU, from $LOG
  grep -aom1 -E 'no usable GPU[^"]*|no GPU[^"]*' "$LOG" | head -1 | cut -c1-160
}

# --- environment ------------------------------------------------------------------
s_gpu() {
  GPU=0
  if ! command -v nvidia-smi >/dev/null; then DETAIL="no GPU: nvidia-smi is not on PATH"; return 2; fi
  tmo nvidia-smi -L >"$P/env/nvidia-smi-L.txt" 2>&1
  local rc=$?
  cat "$P/env/nvidia-smi-L.txt"
  GPU=$(grep -c '^GPU [0-9]' "$P/env/nvidia-smi-L.txt")
  if ((rc != 0 || GPU == 0)); then
    GPU=0 DETAIL="no GPU: nvidia-smi -L exited $rc: $(head -1 "$P/env/nvidia-smi-L.txt" | cut -c1-120)"
    return 2
  fi
  local q=index,name,compute_cap,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,power.limit,temperature.gpu,compute_mode,mig.mode.current
  tmo nvidia-smi --query-gpu=$q --format=csv >"$P/env/nvidia-smi-query.csv" 2>&1
  cat "$P/env/nvidia-smi-query.csv"
  tmo nvidia-smi >"$P/env/nvidia-smi.txt" 2>&1
  tmo nvidia-smi -q >"$P/env/nvidia-smi-q.txt" 2>&1
  local first
  first=$(sed -n 2p "$P/env/nvidia-smi-query.csv" | tr -s ' ')
  DETAIL="$GPU GPU(s): $(head -1 "$P/env/nvidia-smi-L.txt" | sed 's/ (UUID.*//') | $first"
  return 0
}

LDD_OBJS=()
s_binaries() {
  local f
  for f in "$T" "$TC"; do
    [[ -x $f ]] || { DETAIL="$f is missing: build first (scripts/build.sh, with the CUDA toolkit for test_cuda) or unpack a scripts/bundle.sh archive and run its scripts/gpu_check.sh"; return 1; }
  done
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" >"$P/env/environment.txt"
  env | grep -E '^(CUDA|NCCL|OMPI|OPAL|PMIX|CUDNN|CUBLAS|PATH|PYTHON)' | sort >>"$P/env/environment.txt"
  uname -a >>"$P/env/environment.txt"
  "$PY" --version >>"$P/env/environment.txt" 2>&1
  LDD_OBJS=("$T" "$TC")
  local m
  for m in "$MPIRUN" orted; do
    m=$(command -v "$m") && LDD_OBJS+=("$(readlink -f "$m")")
  done
  if [[ -n ${OPAL_PREFIX:-} && -d $OPAL_PREFIX ]]; then  # a bundle: Open MPI's and PMIx's plugins too
    while IFS= read -r f; do LDD_OBJS+=("$f"); done < <(find "$OPAL_PREFIX" -name '*.so' | sort)
  fi
  local missing=() o
  : >"$P/env/ldd.txt"
  for o in "${LDD_OBJS[@]}"; do
    { echo "== $o"; ldd "$o" 2>&1; } >>"$P/env/ldd.txt"
  done
  while IFS= read -r m; do missing+=("$m"); done < <(awk '/^== /{o=$2} /not found/{print $1 " (of " o ")"}' "$P/env/ldd.txt" | sort -u)
  tmo "$T" --version >"$P/env/version.txt" 2>&1
  local rc=$?
  cat "$P/env/version.txt"
  if ((${#missing[@]})); then
    DETAIL="ldd: not found: ${missing[*]:0:6}$( ((${#missing[@]} > 6)) && echo " and $((${#missing[@]} - 6)) more"); LD_LIBRARY_PATH must name them (a bundle's bundle_env.sh adds python3's site-packages/nvidia/*/lib: is '$PY' the python that has torch's CUDA wheels?)"
    return 1
  fi
  ((rc == 0)) || { DETAIL="trainer --version exited $rc: $(tail -1 "$P/env/version.txt" | cut -c1-200)"; return 1; }
  local what="trainer, test_cuda, mpirun, orted"
  [[ -n ${OPAL_PREFIX:-} ]] && what+=", Open MPI's and PMIx's plugins"
  DETAIL="$(head -1 "$P/env/version.txt"); ldd resolves every library of ${#LDD_OBJS[@]} files ($what)"
}

s_libraries() {
  local gpu
  grep -q '^backends:' "$P/env/version.txt" 2>/dev/null ||
    { DETAIL="trainer --version did not run (the binaries row says why): nothing to read"; return 1; }
  gpu=$(sed -n 's/^gpu libraries: //p' "$P/env/version.txt")
  [[ -n $gpu ]] || { DETAIL="no 'gpu libraries' line in trainer --version: this trainer was built without the CUDA backend (rebuild with the CUDA toolkit, -DTRAINER_CUDA=ON)"; return 1; }
  local lib dirs=() where=() problems=()
  for lib in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libnvrtc.so.13; do
    local path
    path=$(ldd "$T" | awk -v l="$lib" '$1 == l {print $3}')
    [[ -n $path && -e $path ]] || { problems+=("$lib not linked or not found"); continue; }
    where+=("${lib%%.so*}=$path")
    dirs+=("$(dirname "$(readlink -f "$path")")")
  done
  printf '%s\n' "${where[@]}" >"$P/env/gpu_libraries.txt"
  # what cuDNN and NVRTC dlopen at run time must sit beside them and load
  local cudnn_dir nvrtc_dir sub
  cudnn_dir=$(dirname "$(ldd "$T" | awk '$1 == "libcudnn.so.9" {print $3}')")
  for sub in graph ops heuristic engines_precompiled engines_runtime_compiled adv cnn; do
    if [[ -e $cudnn_dir/libcudnn_$sub.so.9 ]]; then
      ldd "$cudnn_dir/libcudnn_$sub.so.9" >>"$P/env/gpu_libraries.txt" 2>&1
      grep -q 'not found' <(ldd "$cudnn_dir/libcudnn_$sub.so.9" 2>&1) && problems+=("libcudnn_$sub.so.9 has unresolved libraries")
    else
      problems+=("libcudnn_$sub.so.9 missing beside libcudnn.so.9 in $cudnn_dir")
    fi
  done
  nvrtc_dir=$(dirname "$(ldd "$T" | awk '$1 == "libnvrtc.so.13" {print $3}')")
  compgen -G "$nvrtc_dir/libnvrtc-builtins.so.13*" >/dev/null || problems+=("libnvrtc-builtins.so.13.* missing beside libnvrtc.so.13 in $nvrtc_dir")
  # which wheels (dist-info beside the nvidia/ folder) they come from
  local wheels="" d
  for d in $(printf '%s\n' "${dirs[@]}" | sort -u); do
    local site=${d%/nvidia/*}
    [[ $site != "$d" ]] && wheels+=" $(cd "$site" && ls -d nvidia_*.dist-info 2>/dev/null | sed 's/\.dist-info//' | tr '\n' ' ')"
  done
  wheels=$(tr ' ' '\n' <<<"$wheels" | grep -E 'cudnn|nccl|cublas|runtime|nvrtc' | sort -u | tr '\n' ' ')
  local archs=""
  local cuobjdump
  cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
  if [[ -n $cuobjdump ]]; then
    archs=$(tmo "$cuobjdump" --list-elf "$T" 2>/dev/null | grep -o 'sm_[0-9a-z]*' | sort -u | tr '\n' ' ')
  fi
  {
    echo "versions reported by the loaded libraries: $gpu"
    echo "directories: $(printf '%s\n' "${dirs[@]}" | sort -u | tr '\n' ' ')"
    echo "wheels: ${wheels:-none (not from site-packages)}"
    echo "device code in the trainer: ${archs:-cuobjdump not found}"
  } | tee -a "$P/env/gpu_libraries.txt"
  if ((${#problems[@]})); then DETAIL="${problems[*]}"; return 1; fi
  # short form for the table: SITE/nvidia/{cu13,cudnn,nccl}/lib
  local short
  short=$(printf '%s\n' "${dirs[@]}" | sort -u | sed -E 's|^(.*)/nvidia/([^/]*)/lib$|\1/nvidia/{\2}/lib|' |
          awk -F'/nvidia/' 'NF == 2 {split($2, a, "}"); k[$1] = k[$1] (k[$1] ? "," : "") substr(a[1], 2); next} {o = o $0 " "}
                            END {for (s in k) o = o s "/nvidia/{" k[s] "}/lib "; print o}' | sed 's/ $//')
  DETAIL="$gpu; from $short${wheels:+ (wheels: ${wheels% })}${archs:+; device code: ${archs% }}"
}

# --- phase 1 ------------------------------------------------------------------------
s_ops() {
  export CUDA_LAUNCH_BLOCKING=1
  tmo "$TC" --gtest_output=json:"$P/gtest/ops.json"
  local rc=$?
  unset CUDA_LAUNCH_BLOCKING
  [[ -f $P/gtest/ops.json ]] || { DETAIL="test_cuda exited $rc before writing its JSON (a crash or a hang): $(last_error)"; return 1; }
  local counts names
  { read -r counts; read -r names; } < <(gtest_summary "$P/gtest/ops.json")
  local p f s n
  read -r p f s n <<<"$counts"
  local why
  why=$(grep -aom1 'no GPU: .*' "$LOG" | sed 's/^no GPU: //' | cut -c1-160)
  if [[ -n $why ]]; then  # the GPU tests skipped: CUDA sees no GPU
    if ((GPU == 0 && f == 0 && rc == 0)); then
      DETAIL="no GPU ($why): $s GPU tests skipped, $p that need none passed"
      [[ $BACKEND == cuda ]] && return 77
      DETAIL="CPU rehearsal: $DETAIL"; return 2
    fi
    ((GPU > 0)) && STOP=1 DETAIL="nvidia-smi lists a GPU but CUDA sees none ($why): driver/runtime mismatch or a missing libcuda; nothing else can run" && return 1
  fi
  if ((rc != 0 || f > 0)); then DETAIL="$f of $n failed (exit $rc): $names"; return 1; fi
  DETAIL="$p of $n passed$( ((s)) && echo ", $s skipped") with CUDA_LAUNCH_BLOCKING=1"
}

SANITIZER=""
find_sanitizer() {
  local c site
  site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda*/bin/compute-sanitizer \
           /usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer \
           /opt/nvidia/*/*/compute-sanitizer "$site"/nvidia/cu13/bin/compute-sanitizer \
           "$(timeout 10 find /usr/local /opt -maxdepth 6 -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -1)"; do
    [[ -n $c && -x $c && ! -d $c ]] && { SANITIZER=$c; echo "compute-sanitizer: $c"; return 0; }
  done
  return 1
}
s_sanitizer() {  # TOOL
  local tool=$1
  [[ $BACKEND == cpu ]] && { DETAIL="CPU rehearsal: no GPU to sanitize"; return 2; }
  find_sanitizer || { DETAIL="compute-sanitizer not found (PATH, /usr/local/cuda*/bin, /opt/nvidia): not checked"; return 2; }
  local total
  total=$("$TC" --gtest_list_tests --gtest_filter="$KERNEL_FILTER" 2>/dev/null | grep -c '^  ')
  local rep=$P/sanitizer/$tool.txt
  tmo "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 30 --log-file "$rep" \
      "$TC" --gtest_filter="$KERNEL_FILTER" --gtest_output=json:"$P/gtest/$tool.json"
  local rc=$?
  local done_n errors
  done_n=$(grep -c '^\[       OK \]' "$LOG")
  if grep -qiE 'device not supported|not supported on this|unable to (attach|find)' "$rep" "$LOG" 2>/dev/null; then
    DETAIL="compute-sanitizer cannot run here (gVisor machines refuse it): $(grep -aihE 'not supported|unable' "$rep" "$LOG" | head -1 | cut -c1-120)"
    return 2
  fi
  if [[ $tool == racecheck ]]; then
    errors=$(grep -aoE 'RACECHECK SUMMARY: .*' "$rep" | tail -1)
  else
    errors=$(grep -aoE 'ERROR SUMMARY: [0-9]+ errors?' "$rep" | tail -1)
  fi
  local nerr
  nerr=$(grep -aoE '[0-9]+ errors?' <<<"$errors" | grep -oE '[0-9]+' | head -1)
  if ((TIMED_OUT)) && [[ ${nerr:-0} == 0 ]] && ! grep -q '^=========  *\(Invalid\|Race\|Error\)' "$rep" 2>/dev/null; then
    DETAIL="time-boxed at ${SAN_BOX} s: $done_n of $total kernel tests done, no error so far"
    return 4
  fi
  if ((rc == 99 || ${nerr:-0} > 0)); then
    DETAIL="${errors:-errors}: $(grep -aE '^========= +(Invalid|Race|Error|Program hit)' "$rep" | head -2 | sed 's/=* *//' | tr '\n' ';' | cut -c1-200) (sanitizer/$tool.txt)"
    return 1
  fi
  ((rc == 0)) || { DETAIL="exit $rc under $tool: $(last_error)"; return 1; }
  DETAIL="$done_n of $total kernel tests ($KERNEL_FILTER), ${errors:-no summary line}"
}

s_parity() {  # CASE
  local c=$1 tol
  [[ -f $REFS/$c.loss ]] || { DETAIL="no CPU reference $REFS/$c.loss: make the bundle with scripts/bundle.sh (it computes them), or run scripts/gpu_check.sh --references DIR on a machine without the GPU and point GPU_CHECK_REFS at DIR"; return 1; }
  if [[ $BACKEND == cpu && $c == gpt2_* ]]; then DETAIL="CPU rehearsal: GPT-2 124M on the CPU takes minutes; runs on the GPU"; return 2; fi
  [[ $c == *fp32 ]] && tol=1e-3 || tol=2e-2
  case_args "$c"
  train "gpu_$c" "${ARGS[@]}" || return 1
  DETAIL=$(compare "$P/losses/gpu_$c.loss" "$REFS/$c.loss" "$tol")
  local rc=$?
  DETAIL="$DETAIL vs the CPU (refs: $(sed -n 's/^host: //p' "$REFS/MANIFEST.txt" 2>/dev/null | cut -c1-60))"
  return $rc
}

s_determinism() {
  case_args determinism
  train det_a "${ARGS[@]}" && train det_b "${ARGS[@]}" || return 1
  if cmp -s "$P/losses/det_a.loss" "$P/losses/det_b.loss"; then
    DETAIL="12 bf16 steps twice: identical losses and grad norms"
    return 0
  fi
  DETAIL="runs differ, first: $(diff "$P/losses/det_a.loss" "$P/losses/det_b.loss" | grep '^[<>]' | head -2 | tr '\n' ' ')"
  return 1
}

s_resume() {
  case_args resume
  train res_full "${ARGS[@]}" || return 1
  local ck=$W/runs/res_full/ckpt/step_00000006
  [[ -d $ck ]] || { DETAIL="no checkpoint at step 6 ($ck)"; return 1; }
  train res_resumed "${ARGS[@]}" --resume "$ck" || return 1
  if diff <(awk '$1 > 6' "$P/losses/res_full.loss") <(awk '$1 > 6' "$P/losses/res_resumed.loss") >/dev/null &&
     [[ -s $P/losses/res_resumed.loss ]]; then
    DETAIL="steps 7-12 after resuming at 6 equal the uninterrupted run bit for bit"
    return 0
  fi
  DETAIL="resumed steps differ: $(diff <(awk '$1 > 6' "$P/losses/res_full.loss") <(awk '$1 > 6' "$P/losses/res_resumed.loss") | grep '^[<>]' | head -2 | tr '\n' ' ')"
  return 1
}

s_health() {
  local rd=$W/runs/health
  echo "=== trainer health"
  tmo "$T" health configs/demo.toml --set runtime.backend="$BACKEND" --set run.dir="$rd" --set checkpoint.dir="$rd/ckpt" \
      >"$P/logs/health.log" 2>&1
  local rc=$?
  cat "$P/logs/health.log"
  ((rc == 0)) || { DETAIL="trainer health exited $rc: $(tail -2 "$P/logs/health.log" | tr '\n' ' ' | cut -c1-200)"; return 1; }
  local row
  row=$(awk '/^host /{getline; print; exit}' "$P/logs/health.log" | tr -s ' ')
  if [[ $BACKEND == cuda ]] && ! grep -q 'gpu clock MHz' "$P/logs/health.log"; then
    DETAIL="no gpu clock figure: NVML was not read ($row)"
    return 1
  fi
  DETAIL="one node ok: $row"
}

# NAME RANKS RECIPE-ARGS...: mpirun -np RANKS trainer train on this machine
# (its one GPU shared: the data collectives go through MPI), losses kept.
train_ranks() {
  local name=$1 n=$2
  shift 2
  local rd=$W/runs/$name
  echo "=== train $name ($n ranks)"
  # each rank its own cuDNN log files
  tmo "$MPIRUN" -np "$n" bash -c 'export CUDNN_FRONTEND_LOG_FILE=$0.cudnn_frontend.rank$OMPI_COMM_WORLD_RANK.log CUDNN_LOGDEST_DBG=$0.cudnn.rank$OMPI_COMM_WORLD_RANK.log; exec "$@"' \
      "$P/logs/$name" "$T" train "$@" --set runtime.backend="$BACKEND" --set run.dir="$rd" --set checkpoint.dir="$rd/ckpt"
  local rc=$?
  keep_run "$name"
  ((rc == 0)) || { DETAIL="mpirun -np $n trainer train ($name) exited $rc: $(last_error)"; return 1; }
  losses "$rd/metrics.jsonl" >"$P/losses/$name.loss" || { DETAIL="no losses in $name's metrics.jsonl"; return 1; }
}

# CASE RANKS BASELINE RTOL WHAT: CASE's losses on RANKS ranks against
# BASELINE's (one rank), within RTOL.
against_one() {
  command -v "$MPIRUN" >/dev/null || { DETAIL="$MPIRUN not on PATH (a bundle's bundle_env.sh puts its Open MPI first)"; return 1; }
  case_args "$1"
  train_ranks "$1" "$2" "${ARGS[@]}" || return 1
  if [[ ! -f $P/losses/$3.loss ]]; then
    case_args "$3"
    train "$3" "${ARGS[@]}" || return 1
  fi
  DETAIL=$(compare "$P/losses/$1.loss" "$P/losses/$3.loss" "$4")
  local rc=$? place="one GPU"
  [[ $BACKEND == cpu ]] && place="the CPU (rehearsal)"
  DETAIL="$5 on $place vs 1 rank: $DETAIL"
  return $rc
}

s_mpi() { against_one mpi4 4 one4 1e-4 "4 ranks (tp 2 x pp 2)"; }
s_cp_a2a() {
  against_one cp2_a2a 2 one4_bf16 2e-2 "cp 2 all-to-all, bf16 (copy_rows, the all-to-all, the attention on whole sequences of half the heads)"
}
s_cp_ring() {
  against_one cp2_ring 2 one4 1e-4 "cp 2 ring, fp32 (the chunk-pair kernels, k|v and dK|dV round the ring)" || return 1
  local fp32=$DETAIL
  against_one cp2_ring_bf16 2 one4_bf16 2e-2 "bf16 (cuDNN per chunk pair, merged by our kernel)"
  local rc=$?
  DETAIL="$fp32; $DETAIL"
  return $rc
}

# --- phase 2 ------------------------------------------------------------------------
py_torch() {  # python without the bundle's libraries first (torch brings its own)
  if [[ -n ${BUNDLE_LIB:-} ]]; then
    LD_LIBRARY_PATH=${BUNDLE_BASE_LD_LIBRARY_PATH:-} tmo "$PY" "$@"
  else
    tmo "$PY" "$@"
  fi
}
s_torch() {
  py_torch -c 'import torch
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as e:  # a build without NCCL
    nccl = f"none ({type(e).__name__})"
dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, NCCL {nccl}) on {dev}")' \
    >"$P/env/torch.txt" 2>&1
  local rc=$?
  cat "$P/env/torch.txt"
  DETAIL=$(tail -1 "$P/env/torch.txt" | cut -c1-200)
  ((rc == 0)) && return 3
  DETAIL="$PY cannot import torch: $DETAIL"
  return 1
}

BENCH_SET=()
s_bench() {  # LABEL RECIPE MICRO-BATCH
  local label=$1 recipe=$2 mb=$3
  BENCH_SET=(--set training.precision=bf16 --set training.micro_batch="$mb" --set model.seq_len=1024)
  # GPT-2's vocabulary padded to 50304 (a multiple of 128, as llm.c does) for aligned LM-head GEMMs
  [[ $label == gpt2 ]] && BENCH_SET+=(--set model.vocab_size=50304)
  tmo "$T" bench "$recipe" "${BENCH_SET[@]}" --set runtime.backend=cuda --steps 10 --warmup 3 >"$P/perf/bench_$label.log" 2>&1
  local rc=$?
  cat "$P/perf/bench_$label.log"
  if ((rc != 0)); then
    if ((GPU == 0)) && grep -q 'runtime.backend = "cuda" but' "$P/perf/bench_$label.log"; then
      DETAIL=$(grep -om1 'no usable GPU[^;]*\|no GPU[^;]*' "$P/perf/bench_$label.log" | cut -c1-160)
      DETAIL="${DETAIL:-no GPU}: trainer bench stops for want of one"
      return 77
    fi
    DETAIL="$label: trainer bench exited $rc: $(tail -1 "$P/perf/bench_$label.log" | cut -c1-200)"
    return 1
  fi
  local modes=eager
  ((COMPILE)) && modes=eager,compile
  py_torch scripts/bench_torch_gpu.py "$recipe" "${BENCH_SET[@]}" --modes "$modes" --steps 10 --warmup 3 >"$P/perf/torch_$label.log" 2>&1
  cat "$P/perf/torch_$label.log"
  DETAIL=$("$PY" - "$(tail -1 "$P/perf/bench_$label.log")" "$P/perf/torch_$label.log" "$label" <<'PY'
import json, sys
t = json.loads(sys.argv[1])
row = f"{sys.argv[3]}: trainer {t['tokens_per_s']:.0f} tok/s, {t['step_ms']:.1f} ms/step, MFU {100 * t['mfu']:.1f}% ({t.get('peak_source', '')})"
if "host_syncs_per_step" in t:
    row += f", {t['host_syncs_per_step']:g} host syncs/step"
out = [row]
for line in open(sys.argv[2]):
    try:
        p = json.loads(line)
    except ValueError:
        continue
    if "tokens_per_s" in p:
        out.append(f"{p['impl']} {p['tokens_per_s']:.0f} tok/s (trainer {t['tokens_per_s'] / p['tokens_per_s']:.2f}x)")
    elif "error" in p:
        out.append(f"{p['impl']}: {p['error'][:100]}")
if len(out) == 1:
    out.append("PyTorch gave no result (see perf/torch log)")
print("; ".join(out))
PY
) || { DETAIL="$label: could not read trainer bench's JSON line (perf/bench_$label.log)"; return 1; }
  return 3
}

PLAN_SET=(--set 'runtime.backend="cuda"' --set 'training.precision="bf16"' --set model.seq_len=1024
          --set model.vocab_size=50304 --set training.global_batch=32 --set training.micro_batch=8)
s_calibrate() {
  tmo "$T" calibrate configs/gpt2_124m.toml "${PLAN_SET[@]}" --ranks 1 --output "$P/perf/gpu_profile.json" || {
    DETAIL="trainer calibrate exited $?: $(last_error)"; return 1; }
  DETAIL="machine profile of GPT-2 124M bf16 T=1024 on this GPU: perf/gpu_profile.json"
}
s_smoke() {
  [[ -f $P/perf/gpu_profile.json ]] || { DETAIL="no machine profile (calibrate did not finish)"; return 1; }
  tmo "$T" smoke configs/gpt2_124m.toml "${PLAN_SET[@]}" --synthetic --steps 8 --profile "$P/perf/gpu_profile.json" \
      --json "$P/perf/smoke.json" || { DETAIL="trainer smoke exited $?: $(last_error)"; return 1; }
  DETAIL=$("$PY" - "$P/perf/smoke.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
m, p, t = j["measured"], j.get("predicted") or {}, j["memory"]["total"]
pred = f"{p['step_ms']:.1f} ms predicted (ratio {m['step_ms'] / p['step_ms']:.2f})" if "step_ms" in p else "no prediction"
print(f"GPT-2 124M bf16 mb 8: {m['step_ms']:.1f} ms measured vs {pred}, memory {t['measured_mb']:.0f} MB vs plan "
      f"{t['plan_mb']:.0f} MB, MFU {100 * m['mfu']:.1f}%")
PY
) ||
    { DETAIL="could not read perf/smoke.json"; return 1; }
  return 3
}

# --- references (here, never on the lent machine) ------------------------------------
s_ref_data() {
  mkdir -p "$REFS" || { DETAIL="cannot create $REFS"; return 1; }
  rm -rf "$REFS/data" "$REFS/runs" "$REFS/logs" "$REFS/MANIFEST.txt" "$REFS"/*.loss
  tmo "$T" data prepare --input "${DATA_INPUTS[@]}" --output "$REFS/data" --val-fraction 0.1 ||
    { DETAIL="trainer data prepare exited $? (run from the repository root: it reads ${DATA_INPUTS[*]})"; return 1; }
  DETAIL=$(grep -m1 '^prepared' "$LOG" | cut -c1-160)
}
s_ref_case() {  # CASE
  case_args "$1"
  train "cpu_$1" "${ARGS[@]}" || return 1
  cp "$P/losses/cpu_$1.loss" "$REFS/$1.loss"
  mkdir -p "$REFS/runs" && cp -r "$P/runs/cpu_$1" "$REFS/runs/"
  DETAIL="$(wc -l <"$REFS/$1.loss") steps, last loss $(tail -1 "$REFS/$1.loss" | cut -d' ' -f2)"
}

# --- the phases -------------------------------------------------------------------------
echo "gpu_check $NAME: deadline ${DEADLINE} s; output folder $OUT; backend $BACKEND"
case $PHASE in
  references)
    if command -v nvidia-smi >/dev/null && grep -q '^GPU' <<<"$(nvidia-smi -L 2>/dev/null)"; then
      echo "gpu_check: note: this machine has a GPU; the references are computed on its CPU anyway"
    fi
    step data 120 s_ref_data
    for c in "${REF_CASES[@]}"; do step "reference $c" 900 s_ref_case "$c"; done
    if ((FAILED == 0)); then
      {
        echo "trainer: $("$T" --version | head -1)"
        echo "trainer_sha256: $(sha256sum "$T" | cut -d' ' -f1)"
        echo "host: $(hostname) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
        echo "date: $(date -u +%FT%TZ)"
        echo "cases:"
        "$ROOT/scripts/gpu_check.sh" --print-cases
      } >"$REFS/MANIFEST.txt"
      cp -r "$P/logs" "$REFS/" 2>/dev/null
      find "$REFS/logs" -type f -empty -delete 2>/dev/null
      echo "references in $REFS (MANIFEST.txt says what they were computed with)"
    fi
    ;;
  1)
    step gpu 20 s_gpu
    step binaries 60 s_binaries
    step libraries 30 s_libraries
    if ((GPU == 0 && FAILED)) && [[ $BACKEND == cuda ]]; then
      echo "gpu_check: the environment is broken (above); the GPU steps are not tried"
      exit 1
    fi
    step ops 120 s_ops
    [[ -n $STOP ]] && exit "$STOP"
    step health 30 s_health
    # each sanitizer run gets at most half of what the later steps do not need
    box=$(( (DEADLINE_AT - SECONDS - 150) / 2 ))
    ((box > ${GPU_CHECK_SANITIZER_S:-60})) && box=${GPU_CHECK_SANITIZER_S:-60}
    for tool in memcheck racecheck; do
      if ((box >= 15)); then SAN_BOX=$box; step "$tool" "$box" s_sanitizer "$tool"
      else add_row "$tool" SKIP 0 "not run: under 15 s left for it before the later steps' 150 s (--deadline S gives more)"; fi
    done
    for c in "${REF_CASES[@]}"; do step "parity ${c/_/ }" 60 s_parity "$c"; done
    step determinism 80 s_determinism
    step resume 80 s_resume
    step "mpi path" 90 s_mpi
    step "cp a2a" 60 s_cp_a2a
    step "cp ring" 60 s_cp_ring
    ;;
  perf)
    step gpu 20 s_gpu
    step binaries 60 s_binaries
    step libraries 30 s_libraries
    if ((GPU == 0 && FAILED)); then
      echo "gpu_check: the environment is broken (above); the GPU steps are not tried"
      exit 1
    fi
    step "throughput gpt2" $((COMPILE ? 240 : 120)) s_bench gpt2 configs/gpt2_124m.toml 16
    [[ -n $STOP ]] && exit "$STOP"
    step torch 60 s_torch
    step "throughput llama" $((COMPILE ? 240 : 120)) s_bench llama configs/llama_162m.toml 16
    step calibrate 180 s_calibrate
    step smoke 90 s_smoke
    ;;
esac
exit "$FAILED"
