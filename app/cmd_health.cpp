// `trainer health RECIPE.toml`: every node of the job measures what a
// training step needs and is compared with the others (planning/node_health.h);
// a table per node, exit 0 when all are fit, kExitUnfitNode when one is not.
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.h"
#include "app/environment.h"
#include "planning/health_check.h"
#include "parallel/mpi_command.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "engine/layout.h"
#include "parallel/mpi_world.h"
#include "runtime/errors.h"
#include "runtime/peer_probe.h"

namespace trainer {

namespace {

const char* kHealthUsage =
    "usage: [mpirun -np N | srun] trainer health RECIPE.toml [--set section.key=value ...]\n"
    "  Every node of the job (its first rank; launch with any ranks per node) measures in a\n"
    "  few seconds what a training step needs, and is compared with the median of the nodes:\n"
    "  a square product on the recipe's backend (GFLOP/s), host memory bandwidth, free host\n"
    "  memory, writing and fsyncing 32 MB in checkpoint.dir (only what a checkpoint of the\n"
    "  node's ranks needs where less is free), and between nodes a 16 MB\n"
    "  all-reduce and 4 MB sent to and back from each other node (the median over them).\n"
    "  On a GPU (runtime.backend = \"cuda\") also the driver's figures (NVML) for every GPU of\n"
    "  the node: the clock of the one the product runs on, while it runs (against the median\n"
    "  like the rest); a GPU the driver cannot reach, uncorrected ECC errors or a failed row\n"
    "  remapping fail the node, clocks held down by the hardware, rows waiting for a reset or\n"
    "  a narrowed PCIe link slow it. A node without these figures says why under the table.\n"
    "  A node is slow when a figure is below health.min_ratio of the median (default 0.8),\n"
    "  failed when a measurement failed. A node unfit in the first measurement is measured again\n"
    "  with the rest and is unfit only if the second agrees (its row says \"re-measured\" or\n"
    "  \"confirmed\"). Exit 0 when every node is ok, 10 when one is not.\n"
    "  While the check runs the hosts probe each other every runtime.comm_timeout: a host that\n"
    "  stops answering (twice) ends it, named, with exit 10 (a slow host that answers never does).\n"
    "  health.in_turn = true: the nodes measure their own figures one after another, not all\n"
    "  at once (nodes that share hardware: a fake cluster's hosts share this machine's cores).\n"
    "  health.check = true runs the same check when `trainer train` starts, or, under\n"
    "  `trainer supervise` with an allocation, on every usable host before each launch.\n";

int health(const RecipeArgs& args, int rank, int size) {
  Recipe r;
  std::unique_ptr<Backend> be;
  // A recipe error, or a backend one rank cannot start: every rank ends
  // with one message, none waits in the measurements' collectives.
  const int node_ranks = ranks_on_node();
  if (const int code = agree_on_failure(MPI_COMM_WORLD, [&] {
        r = load_recipe(args.recipe, args.overrides, 0, false);
        be = make_backend(backend_options(r, node_ranks, launcher_local_rank()));
      }))
    return code;
  // Run by `trainer supervise` before a launch (supervisor_launch() >= 0):
  // it excludes the hosts recorded unfit.
  bool fit = true;
  // The hosts' probe addresses (every rank reaches this): a host cut off
  // mid-check is found by probing, not waited for (check_nodes).
  std::unique_ptr<PeerProbe> probe;
  if (size > 1) {
    probe = std::make_unique<PeerProbe>();
    swap_probe_addresses(*probe);
  }
  // A failure the nodes share (the checkpoint directory's disk) comes alike
  // on every rank: said once.
  if (const int code = agree_on_failure(MPI_COMM_WORLD, [&] {
        fit = check_nodes(r, *be, probe.get(), node_ranks, rank, size, supervisor_launch()).empty();
      }))
    return code;
  return fit ? kExitOk : kExitUnfitNode;
}

}  // namespace

int cmd_health(int argc, char** argv) {
  const RecipeArgs args = parse_recipe_args({"health", kHealthUsage, {}, {}}, argc, argv);
  if (args.help) return std::fputs(kHealthUsage, stdout), kExitOk;
  return run_under_mpi([&](int rank, int size) { return health(args, rank, size); });
}

}  // namespace trainer
