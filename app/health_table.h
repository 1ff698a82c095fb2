#pragma once
// What `trainer health` and `trainer train` with health.check print of the
// nodes' figures (planning/node_health.h): a row per node, each figure with
// its ratio to the nodes' median and the verdict; and one line naming the
// unfit nodes, for an error message.
#include <string>
#include <vector>

#include "planning/node_health.h"

namespace trainer {

std::string health_table(const std::vector<NodeFigures>& nodes, const std::vector<NodeVerdict>& verdicts,
                         double min_ratio, int ranks);
std::string unfit_nodes(const std::vector<NodeFigures>& nodes, const std::vector<NodeVerdict>& verdicts);

}  // namespace trainer
