#!/usr/bin/env bash
# What supervision costs at run time: the flight recorder next to the cheapest
# collective the trainer makes (8-byte all-reduce, 2 ranks, plain vs recorded
# in alternating rounds, same run), and the recorder on its own.
#   scripts/bench_supervision.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
. scripts/mpi_env.sh
mpirun -np 2 build/bench/bench_flight_recorder
