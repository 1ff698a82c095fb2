#include "app/health_deadline.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "app/health_table.h"
#include "parallel/mpi_world.h"
#include "runtime/errors.h"

namespace trainer {

HealthDeadline::HealthDeadline(double timeout_s, const std::string& run_dir, int record_launch)
    : timeout_s_(timeout_s), run_dir_(run_dir), launch_(record_launch) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (timeout_s_ <= 0 || size_ < 2) return;
  auto probe = std::make_unique<PeerProbe>();
  thread_ = std::thread([this] { watch(); });  // from now: a host cut during the swap is a timeout too
  probe->set_peers(allgather_lines(probe->record(), 512), rank_);
  std::lock_guard<std::mutex> l(m_);
  probe_ = std::move(probe);
}

HealthDeadline::~HealthDeadline() {
  {
    std::lock_guard<std::mutex> l(m_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HealthDeadline::watch() {
  PeerProbe* probe = nullptr;
  {
    std::unique_lock<std::mutex> l(m_);
    if (cv_.wait_for(l, std::chrono::duration<double>(timeout_s_), [this] { return done_; })) return;
    probe = probe_.get();  // null: the ranks never finished swapping their probe addresses
  }
  std::vector<int> others;
  for (int r = 0; r < size_; r++)
    if (r != rank_) others.push_back(r);
  // check() gives the flight recorder's member, "network": {...}.
  const nlohmann::json dump =
      probe ? nlohmann::json::parse("{" + probe->check(others, 2.0) + "}", nullptr, false) : nlohmann::json();
  const nlohmann::json net = dump.is_object() ? dump.value("network", nlohmann::json()) : nlohmann::json();
  int lowest = rank_;  // the lowest rank this one can still reach: it speaks for this side
  std::set<std::string> lost;
  if (net.is_object()) {
    for (const auto& r : net.value("reached", nlohmann::json::array()))
      if (r.is_number_integer()) lowest = std::min(lowest, r.get<int>());
    for (const auto& r : net.value("host_ranks", nlohmann::json::array()))
      if (r.is_number_integer()) lowest = std::min(lowest, r.get<int>());
    for (const auto& r : net.value("unreached", nlohmann::json::array()))
      if (r.is_number_integer()) lost.insert(probe->host(r.get<int>()));
  }
  if (rank_ == lowest) {
    std::string hosts;
    for (const std::string& h : lost) hosts += (hosts.empty() ? "" : ", ") + h;
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g", timeout_s_);
    const std::string why =
        "no verdict within runtime.comm_timeout = " + std::string(limit) + " s: " +
        (!probe ? std::string("the ranks never finished swapping their probe addresses (a host cut off as the "
                              "check began)")
         : lost.empty() ? std::string("every host answers a probe, so a rank is stuck, not cut off (its host is "
                                      "unfit all the same)")
                      : "host(s) " + hosts + " do not answer a probe: cut off, take them out of the job");
    std::fprintf(stderr, "error: health: %s\n", why.c_str());
    if (launch_ >= 0 && !lost.empty())
      record_unfit(run_dir_, launch_, std::vector<std::string>(lost.begin(), lost.end()), "health: " + why);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kExitUnfitNode);  // the collectives will not return: no MPI_Finalize
}

}  // namespace trainer
