#!/usr/bin/env bash
# Configures and builds everything (Release) into build/: build/trainer and
# the test binaries. Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build build -j "$(nproc)"
