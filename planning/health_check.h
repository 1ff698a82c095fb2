#pragma once
// The node health check of `trainer health` and of `trainer train` with
// health.check: the nodes' figures (planning/node_health.h) measured and
// judged, a row per node printed (each figure with its ratio to the nodes'
// median and the verdict), and the event that names the unfit nodes' hosts
// for `trainer supervise`.
#include <string>
#include <vector>

#include "recipe/recipe.h"
#include "runtime/backend.h"
#include "runtime/peer_probe.h"

namespace trainer {

// Measures every node of MPI_COMM_WORLD on `be` (measure_nodes), judges
// them against health.min_ratio, prints the table on rank 0 and, when
// record_launch >= 0, has rank 0 append an `unfit_node` event (the unfit
// nodes' hosts and why) to RUN_DIR/events.jsonl, where the supervisor finds
// it after its own event of that launch. Collective. Returns the unfit
// nodes in one line for an error message ("" when all are fit). A disk
// failure every node shares is the checkpoint directory's: UserError with
// exit 8 (no space) or 2, on every rank alike. With `probe` (its peers set;
// null on one rank) each host's first rank probes the other hosts every
// runtime.comm_timeout while the check runs: a host that stops answering
// ends it, named by one rank of the hosts still in touch (and recorded as
// unfit under the supervisor), every watching rank exiting kExitUnfitNode.
std::string check_nodes(const Recipe& r, Backend& be, const PeerProbe* probe, int node_ranks, int rank, int size,
                        int record_launch);

}  // namespace trainer
