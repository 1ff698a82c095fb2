#include "supervise/launch_command.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "runtime/host_name.h"
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

}  // namespace trainer
