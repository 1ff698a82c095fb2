#include "planning/health_check.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "parallel/mpi_world.h"
#include "planning/memory_fit.h"
#include "planning/node_health.h"
#include "runtime/errors.h"
#include "runtime/metrics.h"
#include "runtime/run_events.h"
#include "runtime/peer_watch.h"
#include "runtime/units.h"

namespace trainer {

namespace {

// Appends an `unfit_node` event naming `hosts` (and why) to
// RUN_DIR/events.jsonl for the supervisor's `launch`; a failure to write is
// a warning.
void record_unfit(const std::string& run_dir, int launch, const std::vector<std::string>& hosts,
                  const std::string& why) {
  // A failure to write is a warning: the caller's error says what matters.
  try {
    MetricsLog events(run_dir + "/events.jsonl", false);
    if (!events.write(events::record(events::UnfitNode{.hosts = hosts, .why = why}, launch, why)))
      std::fprintf(stderr, "warning: %s\n", events.error().c_str());
  } catch (const UserError& err) {
    std::fprintf(stderr, "warning: %s\n", err.what());
  }
}

void record_unfit_hosts(const std::string& run_dir, int launch, const std::vector<NodeFigures>& nodes,
                        const std::vector<NodeVerdict>& verdicts, const std::string& unfit) {
  std::vector<std::string> hosts;
  for (size_t i = 0; i < nodes.size(); i++)
    if (verdicts[i].health != Health::Ok) hosts.push_back(nodes[i].host);
  record_unfit(run_dir, launch, hosts, "health.check: " + unfit);
}

std::string verdict_text(const NodeVerdict& v) {
  std::string why;
  for (const std::string& s : v.reasons) why += (why.empty() ? "" : "; ") + s;
  if (v.health == Health::Ok) return why.empty() ? "ok" : "ok (" + why + ")";  // re-measured
  return (v.health == Health::Slow ? "slow: " : "failed: ") + why;
}

// A row per node: each figure with its ratio to the nodes' median, and the verdict.
std::string health_table(const std::vector<NodeFigures>& nodes, const std::vector<NodeVerdict>& verdicts,
                         double min_ratio, int ranks) {
  char b[256];
  std::snprintf(b, sizeof b,
                "health: %zu node(s), %d rank(s); each figure with its ratio to the median of the nodes; a node is "
                "slow below %.2f of it (health.min_ratio)\n",
                nodes.size(), ranks, min_ratio);
  std::string out = b;
  std::snprintf(b, sizeof b, "%-20s %5s", "host", "rank");
  out += b;
  // A figure no node measured (the network on one node, a GPU's clock on
  // the CPU) has no column.
  std::vector<size_t> shown;
  for (size_t k = 0; k < figure_kinds().size(); k++)
    for (const NodeFigures& n : nodes)
      if (n.*figure_kinds()[k].value >= 0) {
        shown.push_back(k);
        break;
      }
  for (const size_t k : shown) {
    std::snprintf(b, sizeof b, " %18s", (std::string(figure_kinds()[k].name) + " " + figure_kinds()[k].unit).c_str());
    out += b;
  }
  out += "  verdict\n";
  for (size_t i = 0; i < nodes.size(); i++) {
    std::snprintf(b, sizeof b, "%-20s %5d", nodes[i].host.c_str(), nodes[i].first_rank);
    out += b;
    for (const size_t k : shown) {
      const double v = nodes[i].*figure_kinds()[k].value, ratio = verdicts[i].ratios[k];
      if (std::isnan(ratio)) std::snprintf(b, sizeof b, " %18s", "-");
      else std::snprintf(b, sizeof b, " %10.2f (%4.2f)", v, ratio);
      out += b;
    }
    out += "  " + verdict_text(verdicts[i]) + "\n";
  }
  for (const NodeFigures& n : nodes)
    if (!n.gpu_note.empty()) out += "note: " + n.host + ": " + n.gpu_note + "\n";
  return out;
}

// The unfit nodes in one line: "host (rank N): slow: ...; ...".
std::string unfit_nodes(const std::vector<NodeFigures>& nodes, const std::vector<NodeVerdict>& verdicts) {
  std::string out;
  for (size_t i = 0; i < nodes.size(); i++)
    if (verdicts[i].health != Health::Ok)
      out += (out.empty() ? "" : "; ") + nodes[i].host + " (rank " + std::to_string(nodes[i].first_rank) +
             "): " + verdict_text(verdicts[i]);
  return out;
}

// The measurements' collectives would wait for ever on a host cut off
// mid-check: this host's first rank probes the others every
// runtime.comm_timeout (runtime/peer_watch.h; a slow host that answers
// never ends the check). When hosts stop answering, the rank that speaks
// for those still in touch names them (and records them unfit for the
// supervisor) and exits kExitUnfitNode; the other watching ranks follow a
// moment later, so that its line gets out first.
std::unique_ptr<PeerWatch> watch_peers(const Recipe& r, const PeerProbe* probe, int rank, int size,
                                       int record_launch) {
  if (!probe || size < 2 || r.runtime.comm_timeout <= 0 || !probe->first_on_host()) return nullptr;
  std::vector<int> others;
  for (int k = 0; k < size; k++)
    if (k != rank) others.push_back(k);
  const double period = r.runtime.comm_timeout;
  const std::string run_dir = r.run.dir;
  return std::make_unique<PeerWatch>(*probe, others, period, [=](const PeerProbe::Result& res) {
    if (res.speaks_for_the_rest(rank)) {
      const std::vector<std::string> lost = res.unreached_hosts();
      const std::string names = join(lost);
      char every[96];
      std::snprintf(every, sizeof every, "every runtime.comm_timeout = %g s", period);
      const std::string why = "host(s) " + names + " stopped answering in the middle of the check (the hosts probe " +
                              "each other " + every + " while it runs, a silent one twice; a slow host that " +
                              "answers never ends it)";
      std::fprintf(stderr, "error: health: %s: no verdict on the other nodes; take %s out of the job\n", why.c_str(),
                   lost.size() > 1 ? "them" : "it");
      if (record_launch >= 0) record_unfit(run_dir, record_launch, lost, "health: " + why);
      std::fflush(stdout), std::fflush(stderr);
      std::_Exit(kExitUnfitNode);
    }
    std::fflush(stdout), std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::_Exit(kExitUnfitNode);
  });
}

}  // namespace

std::string check_nodes(const Recipe& r, Backend& be, const PeerProbe* probe, int node_ranks, int rank, int size,
                        int record_launch) {
  const std::unique_ptr<PeerWatch> watch = watch_peers(r, probe, rank, size, record_launch);
  // (Rank 0 is always the first on its host: it watches when anyone does.)
  if (rank == 0 && watch)
    std::printf("health: the hosts probe each other every %g s (runtime.comm_timeout) while the check runs: one "
                "that stops answering ends it\n", r.runtime.comm_timeout),
        std::fflush(stdout);
  // The disk probe asks for what a checkpoint of the node's ranks needs (a
  // small model's is far below the 32 MB it asks at most).
  const double disk_mb = std::clamp(std::ceil(checkpoint_file_bytes(r) * node_ranks / (1 << 20)), 1.0, 32.0);
  std::vector<NodeFigures> nodes = measure_nodes(MPI_COMM_WORLD, be, r.checkpoint.dir, disk_mb, r.health.in_turn);
  // One file system that fails every node's probe alike is the path's fault.
  int code = 0;
  if (const std::string why = shared_disk_failure(nodes, r.checkpoint.dir, disk_mb, &code); !why.empty())
    throw UserError(code, "health: " + why);
  std::vector<NodeVerdict> verdicts = judge_nodes(nodes, r.health.min_ratio);
  // A node is excluded only when a second measurement finds it unfit too
  // (every rank holds the same figures, so all measure again or none).
  if (any_unfit(verdicts)) {
    if (rank == 0)
      std::printf("health: %s looked unfit; measuring every node again\n", unfit_nodes(nodes, verdicts).c_str()),
          std::fflush(stdout);
    nodes = measure_nodes(MPI_COMM_WORLD, be, r.checkpoint.dir, disk_mb, r.health.in_turn);
    verdicts = confirm_verdicts(verdicts, judge_nodes(nodes, r.health.min_ratio));
  }
  if (rank == 0) std::fputs(health_table(nodes, verdicts, r.health.min_ratio, size).c_str(), stdout), std::fflush(stdout);
  const std::string unfit = unfit_nodes(nodes, verdicts);
  if (!unfit.empty() && rank == 0 && record_launch >= 0) record_unfit_hosts(r.run.dir, record_launch, nodes, verdicts, unfit);
  return unfit;
}

}  // namespace trainer
