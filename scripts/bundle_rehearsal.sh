#!/usr/bin/env bash
# Rehearses a scripts/bundle.sh archive here the way the lent GPU machine will
# see it, so that the one lent run is not spent on a missing library: the
# bundle unpacked and run under `env -i` in a private mount namespace
# (`unshare -m`, as root) where
#   - /usr/local/cuda* is hidden (a whiteout in an overlay over /usr),
#   - every file of the Debian packages the trainer links or that the build
#     needed (Open MPI, PMIx, HDF5, OpenBLAS, toml++, sentencepiece, GTest,
#     their -dev packages, and each package that owns a library the bundle
#     carries) is hidden, except the few base packages the shell tools
#     themselves load (glibc, libselinux, libpcre2, ...: the target has its own),
#   - and the NVIDIA libraries come only from the PyPI wheels the lent
#     machine's torch 2.11.0+cu130 pins (cuda-toolkit 13.0.2's cudart 13.0.96,
#     cuBLAS 13.1.0.3, NVRTC and nvJitLink 13.0.88; cuDNN 9.19.0.56; NCCL
#     2.28.9), installed into a throwaway venv whose python comes first on
#     PATH, so that bundle_env.sh finds them as it finds torch's there.
# Checks: ldd of the trainer, test_cuda, orterun and orted finds everything,
# the CUDA libraries in the venv; `trainer --version` runs; test_cuda runs,
# its GPU tests skip for want of a GPU and the others pass; 2 ranks train 2
# CPU steps through the bundle's Open MPI; `scripts/gpu_check.sh` ends with
# exit 77 and its table, leaving at most 8 files with one tarball in $OUT (and
# `--perf` likewise); GPU_CHECK_BACKEND=cpu runs phase 1's training steps on
# the CPU through the bundle's libraries (--quick leaves that minute out).
# usage: scripts/bundle_rehearsal.sh [--quick] [BUNDLE.tar.gz]   (default gpu_bundle/bundle.tar.gz)
# Scratch under $REHEARSAL_DIR (default /tmp/trainer_rehearsal); the wheels
# (~1.1 GB, downloaded once with pip) under $REHEARSAL_WHEELS (default
# /tmp/trainer_gpu_wheels): neither belongs in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
R=${REHEARSAL_DIR:-/tmp/trainer_rehearsal}
WHEELS=${REHEARSAL_WHEELS:-/tmp/trainer_gpu_wheels}
PINS=(nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.1.0.3 nvidia-cuda-nvrtc==13.0.88 nvidia-nvjitlink==13.0.88
      nvidia-cudnn-cu13==9.19.0.56 nvidia-nccl-cu13==2.28.9)
die() { echo "bundle_rehearsal: $*" >&2; exit 1; }

# --- inside the namespace (the script runs itself again under unshare) --------
if [[ ${1:-} == --inside ]]; then
  bundle=$2 quick=$3
  mount -t overlay overlay -o "lowerdir=/usr,upperdir=$R/ov/upper,workdir=$R/ov/work" /usr ||
    die "cannot mount the overlay over /usr (needs overlayfs and root)"
  while IFS= read -r f; do mount --bind /dev/null "$f"; done <"$R/hide_outside_usr.txt"
  results=()
  fails=0
  res() { results+=("$(printf '%-4s %s' "$1" "$2")"); [[ $1 == PASS ]] || fails=1; echo "[rehearsal] $1 $2"; }
  # the hiding itself: the unbundled trainer must now miss its libraries
  key=(libmpi.so.40 libhdf5_openmpi.so.103 libtomlplusplus.so.3 libopenblas.so.0 libcudart.so.13 libcudnn.so.9
       libnccl.so.2 libcublasLt.so.13)
  miss=0 host_ldd=$(ldd "$ROOT/build/trainer" 2>&1 || true)
  for k in "${key[@]}"; do grep -q "^\s$k => not found" <<<"$host_ldd" && miss=$((miss + 1)); done
  if [[ $miss == 8 && ! -e /usr/local/cuda ]] && ! command -v mpirun >/dev/null; then
    res PASS "hidden: /usr/local/cuda, mpirun, and the unbundled trainer misses its 8 key libraries"
  else
    res FAIL "hiding incomplete: $miss of 8 key libraries missing for the unbundled trainer; /usr/local/cuda $([[ -e /usr/local/cuda ]] && echo visible || echo hidden); mpirun $(command -v mpirun || echo hidden)"
  fi
  rm -rf "$R/b" "$R"/out* && mkdir -p "$R/b"
  tar xzf "$bundle" -C "$R/b"
  site=$("$R/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  clean() {  # CMD: in the unpacked bundle, nothing of this environment but PATH (the venv first) and HOME
    env -i PATH="$R/venv/bin:/usr/bin:/bin" HOME=/root TMPDIR=/tmp LANG=C.UTF-8 \
      bash --noprofile --norc -c "cd '$R/b' && . ./bundle_env.sh && . scripts/mpi_env.sh && $1"
  }
  clean 'ldd build/trainer build/tests/test_cuda ompi/bin/orterun ompi/bin/orted' >"$R/ldd.txt" 2>&1 || true
  nf=$(grep -c 'not found' "$R/ldd.txt" || true)
  cuda_from=$(grep -E '^\s(libcudart|libcublasLt|libcudnn|libnccl|libnvrtc)\.' "$R/ldd.txt" | awk '{print $3}' | sort -u)
  outside=$(grep -v "^$site/nvidia/" <<<"$cuda_from" || true)
  if [[ $nf == 0 && -n $cuda_from && -z $outside ]]; then
    res PASS "ldd: every library of trainer, test_cuda, orterun, orted resolves; CUDA's from the wheels ($(sed "s|$site/||; s|/lib/.*||" <<<"$cuda_from" | sort -u | tr '\n' ' '| sed 's/ $//'))"
  else
    res FAIL "ldd: $nf not found ($(grep 'not found' "$R/ldd.txt" | awk '{print $1}' | sort -u | tr '\n' ' ')); CUDA libraries from outside the wheels: ${outside:-none} ($R/ldd.txt)"
  fi
  if v=$(clean 'build/trainer --version' 2>&1) && grep -q '^gpu libraries:' <<<"$v"; then
    res PASS "trainer --version: $(grep '^gpu libraries:' <<<"$v")"
  else
    res FAIL "trainer --version: $(tail -2 <<<"$v" | tr '\n' ' ')"
  fi
  set +e
  clean "build/tests/test_cuda --gtest_output=json:$R/test_cuda.json" >"$R/test_cuda.log" 2>&1
  rc=$?
  set -e
  counts=$("$R/venv/bin/python" - "$R/test_cuda.json" <<'PY' 2>/dev/null || echo "? ? ?"
import json, sys
j = json.load(open(sys.argv[1])); p = f = s = 0
for suite in j["testsuites"]:
    for t in suite["testsuite"]:
        if t.get("result") == "SKIPPED": s += 1
        elif t.get("failures"): f += 1
        else: p += 1
print(p, f, s)
PY
)
  read -r p f s <<<"$counts"
  if [[ $rc == 0 && $f == 0 && $s -gt 0 && $p -gt 0 ]] && grep -q 'no GPU' "$R/test_cuda.log"; then
    res PASS "test_cuda: $p tests that need no GPU passed, $s GPU tests skipped ($(grep -om1 'no usable GPU[^.]*' "$R/test_cuda.log"))"
  else
    res FAIL "test_cuda: exit $rc, passed $p, failed $f, skipped $s ($R/test_cuda.log)"
  fi
  set +e
  clean "mpirun -np 2 build/trainer train configs/demo.toml --set runtime.backend=cpu --set 'data.train=[\"gpu_refs/data/train_*.bin\"]' --set 'data.val=[]' --set training.steps=2 --set training.eval_every=0 --set checkpoint.every=0 --set checkpoint.resume=none --set parallel.tp=1 --set parallel.pp=1 --set run.dir=$R/mpi_run --set checkpoint.dir=$R/mpi_run/ckpt" >"$R/mpi.log" 2>&1
  rc=$?
  set -e
  if [[ $rc == 0 ]]; then res PASS "the bundle's Open MPI: 2 ranks trained 2 CPU steps ($(grep -m1 -o 'done: .*steps in [0-9.]* s' "$R/mpi.log"))"
  else res FAIL "mpirun -np 2 from the bundle exited $rc: $(tail -2 "$R/mpi.log" | tr '\n' ' ' | cut -c1-200) ($R/mpi.log)"; fi
  gpu_check() {  # LABEL WANT-RC OUT 'ENV...' ARGS...: scripts/gpu_check.sh from the bundle
    local label=$1 want=$2 out=$3 vars=$4
    shift 4
    local t0=$SECONDS rc log
    log=$R/$(tr -c 'a-zA-Z0-9\n' _ <<<"$label").log
    set +e
    clean "OUT=$out $vars scripts/gpu_check.sh $*" >"$log" 2>&1
    rc=$?
    set -e
    local n tars
    n=$(find "$out" -type f 2>/dev/null | wc -l)
    tars=$(find "$out" -maxdepth 1 -name '*.tar.gz' 2>/dev/null | wc -l)
    local listing
    listing=$(tar tzf "$(find "$out" -maxdepth 1 -name '*.tar.gz' | head -1)" 2>/dev/null || true)
    if [[ $rc == "$want" && $n -le 8 && $tars == 1 ]] && grep -q "^== gpu_check.*: exit $want" "$log" &&
       grep -q '/summary.txt$' <<<"$listing"; then
      res PASS "$label: exit $rc in $((SECONDS - t0)) s, table printed, $n files in \$OUT ($(cd "$out" && ls | tr '\n' ' ' | sed 's/ $//'))"
    else
      res FAIL "$label: exit $rc (want $want) in $((SECONDS - t0)) s, $n files and $tars tarballs in $out ($log)"
      tail -n 30 "$log"
    fi
  }
  gpu_check "gpu_check" 77 "$R/out" ""
  gpu_check "gpu_check --perf" 77 "$R/out_perf" "" --perf
  [[ $quick == 1 ]] || gpu_check "gpu_check, phase 1 on the CPU backend" 0 "$R/out_cpu" GPU_CHECK_BACKEND=cpu
  echo
  echo "== bundle rehearsal: $([[ $fails == 0 ]] && echo passed || echo FAILED) =="
  printf '%s\n' "${results[@]}"
  exit $fails
fi

# --- outside: the wheels, the venv, what to hide --------------------------------
quick=0
bundle=gpu_bundle/bundle.tar.gz
while (($#)); do
  case $1 in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) bundle=$1 ;;
  esac
  shift
done
[[ $(id -u) == 0 ]] || die "needs root (unshare -m and mount)"
[[ -f $bundle ]] || die "no $bundle: make it with scripts/bundle.sh"
bundle=$(readlink -f "$bundle")
command -v unshare >/dev/null || die "unshare (util-linux) is missing"
mkdir -p "$R" "$WHEELS"

# 1. The wheels, once (pip download; exactly these versions, no dependencies).
want=()
for pin in "${PINS[@]}"; do
  name=${pin%%==*} ver=${pin#*==}
  compgen -G "$WHEELS/${name//-/_}-$ver-*.whl" >/dev/null || want+=("$pin")
done
if ((${#want[@]})); then
  echo "bundle_rehearsal: downloading ${want[*]} into $WHEELS"
  t0=$(date +%s.%N)
  plat=()
  for n in 28 27 24 18 17 12; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
  python3 -m pip download -q --no-deps --only-binary=:all: "${plat[@]}" --platform manylinux2014_x86_64 \
    --platform manylinux2010_x86_64 -d "$WHEELS" "${want[@]}" ||
    die "pip download of ${want[*]} failed (PyPI reachable? pip download works here)"
  echo "bundle_rehearsal: wheels downloaded in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s"
fi
wheel_files=()
for pin in "${PINS[@]}"; do
  name=${pin%%==*} ver=${pin#*==}
  f=$(compgen -G "$WHEELS/${name//-/_}-$ver-*.whl" | head -1) || die "no wheel for $pin in $WHEELS"
  wheel_files+=("$f")
done
echo "bundle_rehearsal: wheels: $(du -ch "${wheel_files[@]}" | tail -1 | cut -f1) in ${#wheel_files[@]} files"

# 2. A throwaway venv holding them, as torch's venv holds them on the target.
if [[ ! -f $R/venv/.pins ]] || [[ $(cat "$R/venv/.pins") != "${PINS[*]}" ]]; then
  rm -rf "$R/venv"
  base=$(python3 -c 'import sys; print(sys.executable)')
  "$base" -m venv "$R/venv" || die "python3 -m venv failed ($base)"
  t0=$SECONDS
  "$R/venv/bin/python" -m pip install -q --no-index --no-deps --no-compile "${wheel_files[@]}" ||
    die "installing the wheels into $R/venv failed"
  echo "${PINS[*]}" >"$R/venv/.pins"
  echo "bundle_rehearsal: venv $R/venv with the wheels in $((SECONDS - t0)) s"
fi

# 3. What to hide: packages owning the libraries the unbundled binaries load
# (what the bundle replaces), the build's -dev packages and the families of
# what the trainer links, less the packages the shell tools load here.
arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
objs=("$ROOT/build/trainer" "$ROOT/build/tests/test_cuda" /usr/bin/orterun /usr/bin/orted)
while IFS= read -r f; do objs+=("$f"); done < <(find "/usr/lib/$arch/openmpi/lib/openmpi3" "/usr/lib/$arch/pmix2/lib/pmix" -name '*.so' 2>/dev/null)
ldd "${objs[@]}" 2>/dev/null | awk '/=> \// {print $3}' | grep -v '^/usr/local/cuda' | sort -u >"$R/host_libs.txt"
owner() {  # PATH: the Debian package that owns it ('' if none)
  local r
  r=$(readlink -f "$1")
  { dpkg -S "$r" 2>/dev/null || dpkg -S "${r#/usr}" 2>/dev/null || true; } | head -1 | cut -d: -f1
}
tools=(bash sh ls cat cp mv rm mkdir ln tar gzip grep sed awk find sort head tail cut tr wc cmp diff du date
       stat timeout env nproc sha256sum readlink realpath basename dirname mktemp tee uname hostname id sleep
       xargs mount umount)
keep=" libc6 libgcc-s1 libstdc++6 "
{
  for t in "${tools[@]}"; do p=$(command -v "$t") && [[ $p == /* ]] && readlink -f "$p"; done
  readlink -f "$R/venv/bin/python"
} | xargs ldd 2>/dev/null | awk '/=> \// {print $3}' | sort -u >"$R/tool_libs.txt"
while IFS= read -r l; do keep+="$(owner "$l") "; done <"$R/tool_libs.txt"
hide=()
add_pkg() { [[ -n $1 && $keep != *" $1 "* && " ${hide[*]} " != *" $1 "* ]] && hide+=("$1"); return 0; }
while IFS= read -r l; do add_pkg "$(owner "$l")"; done <"$R/host_libs.txt"
while IFS= read -r p; do add_pkg "$p"; done < <(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' |
  awk '$1 ~ /^ii/ {print $2}' | sed 's/:.*//' |
  grep -E '^(lib)?(openmpi|hdf5|openblas|blas|lapack|tomlplusplus|gtest|gmock|googletest|pmix|hwloc|event-|sentencepiece|ucx|fabric|psm|ibverbs|rdmacm|aec|sz2|munge|numa|curl4)' || true)
echo "bundle_rehearsal: hiding ${#hide[@]} packages: ${hide[*]}"
echo "bundle_rehearsal: keeping the tools' own: $keep"
rm -rf "$R/ov" && mkdir -p "$R/ov/upper" "$R/ov/work"
: >"$R/hide_outside_usr.txt"
whiteout() {  # PATH: hidden in the overlay over /usr, or /dev/null bound over it elsewhere
  local p=$1 parent canon
  parent=$(readlink -f "$(dirname "$p")") || return 0
  canon=$parent/$(basename "$p")
  if [[ $canon == /usr/* ]]; then
    [[ -d $canon && ! -L $canon ]] && return 0  # directories stay (their files go)
    mkdir -p "$R/ov/upper${parent#/usr}" && { [[ -e $R/ov/upper${canon#/usr} ]] || mknod "$R/ov/upper${canon#/usr}" c 0 0; }
  elif [[ -f $canon && ! -L $canon && $canon != /dev/* && $canon != /proc/* ]]; then
    echo "$canon" >>"$R/hide_outside_usr.txt"
  fi
}
n=0
for pkg in "${hide[@]}"; do
  while IFS= read -r f; do
    [[ $f == /* ]] || continue
    whiteout "$f"
    n=$((n + 1))
  done < <(dpkg -L "$pkg" 2>/dev/null)
done
# the paths ldd printed too (alternatives links such as libopenblas.so.0) and CUDA
while IFS= read -r l; do
  o=$(owner "$l")
  [[ " ${hide[*]} " == *" $o "* ]] && { whiteout "$l"; whiteout "$(readlink -f "$l")"; }
done <"$R/host_libs.txt"
for c in /usr/local/cuda /usr/local/cuda-*; do
  [[ -e $c || -L $c ]] && mkdir -p "$R/ov/upper/local" && mknod "$R/ov/upper${c#/usr}" c 0 0
done
echo "bundle_rehearsal: $n package paths, $(find "$R/ov/upper" -type c | wc -l) whiteouts under /usr, $(wc -l <"$R/hide_outside_usr.txt") files elsewhere"

# 4. The rehearsal itself, in a private mount namespace.
t0=$SECONDS
set +e
unshare -m --propagation private "$0" --inside "$bundle" "$quick"
rc=$?
set -e
echo "bundle_rehearsal: $((SECONDS - t0)) s in the namespace; exit $rc"
exit $rc
