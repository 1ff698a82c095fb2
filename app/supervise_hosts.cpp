#include "app/supervise_hosts.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "report/run_files.h"
#include "runtime/errors.h"
#include "runtime/host_name.h"
#include "runtime/regular_file.h"
#include "runtime/self_exe.h"
#include "runtime/units.h"

namespace trainer {

std::vector<std::string> launcher_prefix(const Recipe& r, int ranks, const std::vector<std::string>& hosts,
                                         bool overlap) {
  std::vector<std::string> command;
  if (r.launch.launcher == "mpirun") {
    command = {"mpirun", "-np", std::to_string(ranks)};
    // To other nodes too; the optional ones only when set here.
    for (const char* v : {"TRAINER_ATTEMPT", "TRAINER_RESUME", "TRAINER_START_MARKS", "TRAINER_LOCK_TOKEN"})
      command.insert(command.end(), {"-x", v});
    for (const char* v : {"TRAINER_FAULT", "TRAINER_CPU_KERNELS"})
      if (std::getenv(v)) command.insert(command.end(), {"-x", v});
    std::vector<std::string> slots;  // "a:2,b:2": so that ranks fill a host before the next
    for (const std::string& h : hosts) slots.push_back(h + ":" + std::to_string(ranks / hosts.size()));
    if (!hosts.empty()) command.insert(command.end(), {"--host", join(slots, ",")});
  } else {
    command = {"srun", "--mpi=pmix", "-n", std::to_string(ranks)};
    if (overlap) command.push_back("--overlap");
    if (!hosts.empty()) command.insert(command.end(), {"-N", std::to_string(hosts.size()), "--nodelist=" + join(hosts, ",")});
  }
  command.insert(command.end(), r.launch.args.begin(), r.launch.args.end());
  return command;
}

std::vector<std::string> launch_command(const Recipe& r, const char* subcommand, const std::string& recipe_path,
                                        const std::vector<std::string>& overrides, int ranks,
                                        const std::vector<std::string>& hosts, int launch) {
  const std::string self = self_executable();
  if (self.empty()) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  // A relaunch's step may share CPUs (and GPUs) with an earlier launch's
  // (srun --overlap): a step that had ranks on a host since lost is not over
  // for Slurm (it holds its resources on the good hosts too) until Slurm
  // marks that host down, minutes later, and without it the relaunch waits.
  std::vector<std::string> command = launcher_prefix(r, ranks, hosts, launch > 0);
  command.insert(command.end(), {self, subcommand, recipe_path});
  for (const auto& o : overrides) command.insert(command.end(), {"--set", o});
  return command;
}

StartMarks read_marks(const std::string& dir, const std::vector<std::string>& hosts) {
  StartMarks m;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  m.marked = (int)names.size();
  auto known = [](const std::vector<std::string>& among, const std::string& name) {
    return std::any_of(among.begin(), among.end(), [&](const std::string& x) { return same_host(x, name); });
  };
  for (const std::string& n : names) m.named &= known(hosts, n);
  for (const std::string& h : hosts)
    if (m.named && !known(names, h)) m.missing.push_back(h);
  return m;
}

Environment launch_environment(int launch, const std::string& marks) {
  return {{"TRAINER_ATTEMPT", std::to_string(launch)}, {"TRAINER_RESUME", "auto"}, {"TRAINER_START_MARKS", marks}};
}

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

Diagnosis health_verdict(const std::string& run_dir, int launch) {
  Diagnosis d;
  for (const nlohmann::json& e : read_jsonl(run_dir + "/events.jsonl")) {
    const auto n = e.find("launch");
    if (n == e.end() || !n->is_number_integer() || n->get<long>() != launch) continue;
    const std::string event = field_text(e, "event");
    if (event == "health_check") d = {};
    if (event == "unfit_node" && e.contains("hosts") && e.at("hosts").is_array()) {
      d.hosts.clear();  // a damaged entry names no host
      for (const nlohmann::json& h : e.at("hosts"))
        if (h.is_string()) d.hosts.push_back(h.get<std::string>());
      d.host_why = field_text(e, "why");
    }
  }
  return d;
}

}  // namespace trainer
