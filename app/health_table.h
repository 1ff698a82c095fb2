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

namespace trainer {

// Measures every node of MPI_COMM_WORLD on `be` (measure_nodes), judges
// them against health.min_ratio, prints the table on rank 0 and, when
// record_launch >= 0, has rank 0 append an `unfit_node` event (the unfit
// nodes' hosts and why) to RUN_DIR/events.jsonl, where the supervisor finds
// it after its own event of that launch. Collective. Returns the unfit
// nodes in one line for an error message ("" when all are fit). A disk
// failure every node shares is the checkpoint directory's: UserError with
// exit 8 (no space) or 2, on every rank alike.
std::string check_nodes(const Recipe& r, Backend& be, int rank, int size, int record_launch);

// Appends an `unfit_node` event naming `hosts` (and why) to
// RUN_DIR/events.jsonl for the supervisor's `launch`; a failure to write is
// a warning.
void record_unfit(const std::string& run_dir, int launch, const std::vector<std::string>& hosts,
                  const std::string& why);

}  // namespace trainer
