#pragma once
// What `trainer health` and `trainer train` with health.check print of the
// nodes' figures (planning/node_health.h): a row per node, each figure with
// its ratio to the nodes' median and the verdict; one line naming the unfit
// nodes, for an error message; and the event that names their hosts for
// `trainer supervise`.
#include <string>
#include <vector>

#include "planning/node_health.h"

namespace trainer {

std::string health_table(const std::vector<NodeFigures>& nodes, const std::vector<NodeVerdict>& verdicts,
                         double min_ratio, int ranks);
std::string unfit_nodes(const std::vector<NodeFigures>& nodes, const std::vector<NodeVerdict>& verdicts);

// Appends an `unfit_node` event (the unfit nodes' hosts and why: "health.check:
// " + unfit_nodes) to RUN_DIR/events.jsonl, where the supervisor finds it
// after its own event of that launch; a failure to write is a warning.
void record_unfit_hosts(const std::string& run_dir, int launch, const std::vector<NodeFigures>& nodes,
                        const std::vector<NodeVerdict>& verdicts);

}  // namespace trainer
