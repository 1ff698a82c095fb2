#!/usr/bin/env bash
# The README demo, from a fresh Debian machine: installs what is missing,
# builds, turns the licence texts in /usr/share/common-licenses into byte
# tokens, trains configs/demo.toml on 8 MPI ranks: dp 2 x pp 2 x tp 2, and
# ends by writing the run's report page (trainer report) and printing its path.
# Extra arguments go to `trainer train` (e.g. --set training.steps=50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
. scripts/mpi_env.sh
if ! compgen -G "datasets/demo/train_*.bin" >/dev/null; then
  build/trainer data prepare --input /usr/share/common-licenses --output datasets/demo --val-fraction 0.1
fi
mpirun -np "${RANKS:-8}" build/trainer train configs/demo.toml "$@"
# The run's page: charts of loss, throughput, step time and memory.
run_dir=$(build/trainer train configs/demo.toml "$@" --print-config | sed -n 's/^dir = "\(.*\)"$/\1/p' | head -1)
build/trainer report "$run_dir"
echo "demo: open $run_dir/report.html in a browser to see the run"
