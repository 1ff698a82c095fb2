#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs on a lent GPU machine, which has the
# NVIDIA libraries (from PyTorch's wheels) but none of this machine's Debian
# packages and no network, into one archive that travels with the device
# tool's `carry` (default gpu_bundle/bundle.tar.gz, ~30 MB; refused over
# 60 MiB, since a call carries at most 64 MiB with the working tree):
#   build/trainer, build/tests/test_cuda, the scripts gpu_check.sh needs,
#   configs/ and the PyTorch reference model;
#   gpu_refs/: the CPU references of gpu_check.sh's parity steps and the token
#   data they were trained on (so the GPU trains on the very same tokens),
#   computed HERE by `scripts/gpu_check.sh --references` (a few minutes on 2
#   cores; kept in build/gpu_refs and reused while the trainer binary and the
#   cases are unchanged; --refs DIR packs another such folder);
#   lib/: every shared library they and Open MPI's plugins load, except glibc,
#   libstdc++/libgcc (the target must have glibc >= 2.36 and GCC 12's) and
#   the CUDA libraries (too big to carry; the target's own are used);
#   ompi/: Open MPI's launcher, daemon, plugins and help files, relocated with
#   OPAL_PREFIX; PMIx's plugins and help files (PMIX_PKGLIBDIR/PKGDATADIR);
#   bundle_env.sh, which gpu_check.sh sources: those variables, and
#   LD_LIBRARY_PATH with the CUDA, cuDNN and NCCL libraries of the target's
#   PyTorch (python3's site-packages/nvidia/*/lib).
# usage: scripts/bundle.sh [--refs DIR] [OUTPUT.tar.gz]
# On the target (docs/PERFORMANCE.md has the device tool's exact call):
#   mkdir -p /tmp/b && tar xzf gpu_bundle/bundle.tar.gz -C /tmp/b && /tmp/b/scripts/gpu_check.sh
# scripts/bundle_rehearsal.sh checks an archive here the way the target sees it.
set -euo pipefail
cd "$(dirname "$0")/.."
refs=""
out=gpu_bundle/bundle.tar.gz
while (($#)); do
  case $1 in
    --refs) refs=${2:?bundle: --refs needs a folder made by scripts/gpu_check.sh --references}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bundle: unknown option '$1' (scripts/bundle.sh --help)" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done
[[ -x build/trainer && -x build/tests/test_cuda ]] ||
  { echo "bundle: build first (scripts/build.sh) with the CUDA backend (build/tests/test_cuda)" >&2; exit 1; }
grep -q '^gpu libraries:' <<<"$(build/trainer --version)" ||
  { echo "bundle: build/trainer has no CUDA backend (trainer --version names no gpu libraries): build where the CUDA toolkit is" >&2; exit 1; }
arch=$(gcc -print-multiarch)

# The CPU references: valid while the manifest names this very binary and the
# cases gpu_check.sh would run now.
refs_valid() {  # DIR
  [[ -f $1/MANIFEST.txt ]] &&
    grep -qx "trainer_sha256: $(sha256sum build/trainer | cut -d' ' -f1)" "$1/MANIFEST.txt" &&
    diff -q <(sed -n '/^cases:$/,$p' "$1/MANIFEST.txt" | sed 1d) <(scripts/gpu_check.sh --print-cases) >/dev/null &&
    compgen -G "$1/data/train_*.bin" >/dev/null
}
if [[ -n $refs ]]; then
  refs_valid "$refs" || { echo "bundle: $refs does not hold references of this build/trainer and these cases (its MANIFEST.txt); make them with scripts/gpu_check.sh --references $refs" >&2; exit 1; }
else
  refs=build/gpu_refs
  if refs_valid "$refs"; then
    echo "bundle: reusing the CPU references in $refs (same trainer binary, same cases)"
  else
    echo "bundle: computing the CPU references into $refs (scripts/gpu_check.sh --references; a few minutes on 2 cores)"
    scripts/gpu_check.sh --references "$refs" ||
      { echo "bundle: the CPU references failed (table above; logs in $refs/logs): fix that first" >&2; exit 1; }
    refs_valid "$refs" || { echo "bundle: $refs is still not valid after computing it (MANIFEST.txt?)" >&2; exit 1; }
  fi
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/tests" "$stage/lib" "$stage/tests/reference" "$stage/scripts"
cp build/trainer "$stage/build/"
cp build/tests/test_cuda "$stage/build/tests/"
cp scripts/gpu_check.sh scripts/mpi_env.sh scripts/bench_torch_gpu.py scripts/bench_torch.py "$stage/scripts/"
cp tests/reference/torch_model.py "$stage/tests/reference/"
cp -r configs "$stage/"
cp -r "$refs" "$stage/gpu_refs"

# Open MPI as Debian lays it out under its prefix (/usr), and PMIx.
ompi="$stage/ompi"
mkdir -p "$ompi/bin" "$ompi/lib/$arch/openmpi/lib" "$ompi/share" "$ompi/pmix"
cp -L /usr/bin/orterun /usr/bin/orted "$ompi/bin/"
ln -s orterun "$ompi/bin/mpirun"
cp -r "/usr/lib/$arch/openmpi/lib/openmpi3" "$ompi/lib/$arch/openmpi/lib/"
cp -r /usr/share/openmpi "$ompi/share/"
cp -r "/usr/lib/$arch/pmix2/lib/pmix" "$ompi/pmix/lib"
cp -r "/usr/lib/$arch/pmix2/share/pmix" "$ompi/pmix/share"

# Shared libraries of everything that runs there, leaving out the system's
# own and CUDA's.
skip='^(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnvrtc.*|libnvJitLink)\.so'
objs=(build/trainer build/tests/test_cuda /usr/bin/orterun /usr/bin/orted
      $(find "/usr/lib/$arch/openmpi/lib/openmpi3" "/usr/lib/$arch/pmix2/lib/pmix" -name '*.so'))
ldd "${objs[@]}" 2>/dev/null | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -Ln "$path" "$stage/lib/$name"
done

cat >"$stage/bundle_env.sh" <<'ENV'
# Sourced by scripts/gpu_check.sh in an unpacked bundle (the working directory):
# the bundle's libraries first, then the CUDA, cuDNN and NCCL libraries of the
# python that has PyTorch's wheels ($PYTHON, else python3 on PATH), then
# /usr/local/cuda's as a last resort; Open MPI and PMIx relocated.
b=$(pwd)
site=$(${PYTHON:-python3} -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
nv=""
for d in "$site"/nvidia/cu13/lib "$site"/nvidia/cudnn/lib "$site"/nvidia/nccl/lib "$site"/nvidia/*/lib /usr/local/cuda/lib64; do
  [[ -d $d && :$nv: != *:$d:* ]] && nv="$nv:$d"
done
export BUNDLE_LIB="$b/lib" BUNDLE_BASE_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH="$b/lib${nv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$b/ompi" PATH="$b/ompi/bin:$PATH"
export PMIX_PKGLIBDIR="$b/ompi/pmix/lib" PMIX_PKGDATADIR="$b/ompi/pmix/share"
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_plm_rsh_agent=false
ENV
mkdir -p "$(dirname "$out")"
tar czf "$out" -C "$stage" .
size=$(stat -c %s "$out")
echo "bundle: $out ($((size / 1024 / 1024)) MiB); $(ls "$stage/lib" | wc -l) libraries; references from $refs"
if ((size > 60 * 1024 * 1024)); then
  echo "bundle: $out is over 60 MiB: with the working tree it would not fit the 64 MiB a device call carries" >&2
  exit 1
fi
