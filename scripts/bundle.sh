#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs on a GPU machine that has the NVIDIA
# libraries (from PyTorch's wheels) but none of this machine's Debian
# packages, into one archive (default gpu_bundle/bundle.tar.gz, ~30 MB):
#   build/trainer, build/tests/test_cuda, the scripts, configs, docs (the
#   check's training text) and the PyTorch reference model;
#   lib/: every shared library they and Open MPI's plugins load, except glibc,
#   libstdc++/libgcc (the target must have glibc >= 2.36 and GCC 12's) and
#   the CUDA libraries (too big to carry; the target's own are used);
#   ompi/: Open MPI's launcher, daemon, plugins and help files, relocated with
#   OPAL_PREFIX; PMIx's plugins and help files (PMIX_PKGLIBDIR/PKGDATADIR);
#   bundle_env.sh, which gpu_check.sh sources: those variables, and
#   LD_LIBRARY_PATH with the CUDA, cuDNN and NCCL libraries of the target's
#   PyTorch (site-packages/nvidia/...).
# usage: scripts/bundle.sh [OUTPUT.tar.gz]; on the target:
#   mkdir b && tar xzf bundle.tar.gz -C b && b/scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu_bundle/bundle.tar.gz}
[[ -x build/trainer && -x build/tests/test_cuda ]] ||
  { echo "bundle: build first (scripts/build.sh) with the CUDA backend (build/tests/test_cuda)" >&2; exit 1; }
arch=$(gcc -print-multiarch)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

mkdir -p "$stage/build/tests" "$stage/lib" "$stage/tests/reference" "$stage/scripts"
cp build/trainer "$stage/build/"
cp build/tests/test_cuda "$stage/build/tests/"
cp scripts/gpu_check.sh scripts/mpi_env.sh scripts/bench_torch_gpu.py scripts/bench_torch.py "$stage/scripts/"
cp tests/reference/torch_model.py "$stage/tests/reference/"
cp -r configs docs README.md "$stage/"

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
# Sourced by scripts/gpu_check.sh in an unpacked bundle (the working directory).
b=$(pwd)
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
nv=""
for d in "$site"/nvidia/cu13/lib "$site"/nvidia/cudnn/lib "$site"/nvidia/nccl/lib "$site"/nvidia/*/lib; do
  [[ -d $d ]] && nv="$nv:$d"
done
export LD_LIBRARY_PATH="$b/lib${nv}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$b/ompi" PATH="$b/ompi/bin:$PATH"
export PMIX_PKGLIBDIR="$b/ompi/pmix/lib" PMIX_PKGDATADIR="$b/ompi/pmix/share"
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_plm_rsh_agent=false
ENV
mkdir -p "$(dirname "$out")"
tar czf "$out" -C "$stage" .
echo "bundle: $out ($(du -h "$out" | cut -f1)); $(ls "$stage/lib" | wc -l) libraries"
