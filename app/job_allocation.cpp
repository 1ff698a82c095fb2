#include "app/job_allocation.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "runtime/errors.h"
#include "runtime/regular_file.h"
#include "runtime/units.h"

namespace trainer {

std::optional<Allocation> job_allocation(const Recipe& r) {
  std::vector<std::string> hosts = r.launch.hosts;
  try {
    if (!r.launch.hostfile.empty()) {
      if (const std::string why = not_regular_file(r.launch.hostfile); !why.empty())
        throw RecipeError("[launch] hostfile: " + why);
      std::ifstream in(r.launch.hostfile);
      if (!in) throw RecipeError("[launch] hostfile: cannot read " + r.launch.hostfile + ": " + std::strerror(errno));
      std::stringstream text;
      text << in.rdbuf();
      hosts = parse_hostfile(text.str());
      if (hosts.empty()) throw RecipeError("[launch] hostfile: " + r.launch.hostfile + " lists no host");
    }
    const char* slurm = std::getenv("SLURM_JOB_NODELIST");
    if (hosts.empty() && r.launch.nodes > 0) {
      if (!slurm || !*slurm)
        throw RecipeError("[launch] nodes = " + std::to_string(r.launch.nodes) +
                          " picks hosts from an allocation, and there is none: set launch.hosts or launch.hostfile, "
                          "or run under Slurm (sbatch -N " + std::to_string(r.launch.nodes + 2) +
                          " for 2 spares)");
      hosts = expand_hostlist(slurm);
    }
    if (hosts.empty()) return std::nullopt;
    Allocation a(hosts, r.launch.nodes);
    const int ranks = r.launch.ranks > 0 ? r.launch.ranks : r.parallel.grid.ranks();
    if (ranks % a.nodes() != 0)
      throw RecipeError("[launch]: the job's " + std::to_string(ranks) + " ranks do not split evenly over the " +
                        std::to_string(a.nodes()) + " hosts a launch runs on; set launch.nodes to a divisor of " +
                        std::to_string(ranks));
    return a;
  } catch (const std::invalid_argument& e) {
    throw RecipeError(std::string("[launch]: ") + e.what());
  }
}

}  // namespace trainer
