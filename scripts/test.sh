#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (unit tests,
# multi-rank tests under mpirun, PyTorch parity, the demo's loss). Extra
# arguments go to ctest (e.g. -R parity).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
scripts/build.sh
. scripts/mpi_env.sh
cd build
exec ctest --output-on-failure -j "$(nproc)" "$@"
