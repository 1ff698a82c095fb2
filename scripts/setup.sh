#!/usr/bin/env bash
# Installs the Debian packages the trainer needs, skipping those present.
#   scripts/setup.sh          build + run (compiler, CMake, MPI, HDF5, toml++, OpenBLAS)
#   scripts/setup.sh test     also GoogleTest, the PyTorch/h5py reference stack and
#                             Slurm + munge (a real single-node Slurm for tests/slurm_check.sh)
set -euo pipefail

pkgs=(g++ cmake ninja-build openmpi-bin libopenmpi-dev libhdf5-openmpi-dev
      libtomlplusplus-dev libopenblas-openmp-dev nlohmann-json3-dev)
if [[ "${1:-}" == "test" ]]; then
  pkgs+=(libgtest-dev hdf5-tools python3-h5py python3-numpy python3-torch slurm-wlm munge)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "setup: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
