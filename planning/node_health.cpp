#include "planning/node_health.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "planning/calibrate.h"
#include "runtime/elapsed.h"
#include "runtime/errors.h"
#include "runtime/gpu_state.h"
#include "runtime/host_memory.h"
#include "runtime/host_name.h"
#include "runtime/sgemm_peak.h"

namespace trainer {

namespace {

double seconds_since(Clock::time_point t0) { return ms_since(t0) / 1e3; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The best of three copies of 128 MB (read and write both counted).
double memory_gbps() {
  const size_t n = (size_t)128 << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 0;
  for (int i = 0; i < 3; i++) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::max(best, 2.0 * n / seconds_since(t0) / 1e9);
    a[i] = (char)(b[n - 1 - i] + 1);  // the next copy cannot be skipped
  }
  return best;
}

// A 16 MB all-reduce over the nodes' first ranks, the best of three; its
// time is the slowest rank's.
double allreduce_gbps(MPI_Comm c) {
  std::vector<float> x((size_t)4 << 20, 1.f);
  double best = 0;
  for (int i = 0; i < 3; i++) {
    MPI_Barrier(c);
    const auto t0 = Clock::now();
    MPI_Allreduce(MPI_IN_PLACE, x.data(), (int)x.size(), MPI_FLOAT, MPI_SUM, c);
    double s = seconds_since(t0);
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, c);
    best = std::max(best, x.size() * sizeof(float) / s / 1e9);
  }
  return best;
}

// Each pair of nodes in turn (the others wait): 4 MB there and back, the
// bytes moved over the round trip's time; a node's figure is the median over
// its pairs, so one bad link marks the node that has it and not every node
// that talks to it.
double p2p_gbps(MPI_Comm c) {
  int me = 0, n = 0;
  MPI_Comm_rank(c, &me);
  MPI_Comm_size(c, &n);
  std::vector<char> buf((size_t)4 << 20, 1);
  std::vector<double> rate((size_t)n * n, 0.0);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      MPI_Barrier(c);
      if (me == i) {
        const auto t0 = Clock::now();
        MPI_Send(buf.data(), (int)buf.size(), MPI_CHAR, j, 0, c);
        MPI_Recv(buf.data(), (int)buf.size(), MPI_CHAR, j, 0, c, MPI_STATUS_IGNORE);
        rate[(size_t)i * n + j] = 2.0 * buf.size() / seconds_since(t0) / 1e9;
      } else if (me == j) {
        MPI_Recv(buf.data(), (int)buf.size(), MPI_CHAR, i, 0, c, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), (int)buf.size(), MPI_CHAR, i, 0, c);
      }
    }
  MPI_Allreduce(MPI_IN_PLACE, rate.data(), (int)rate.size(), MPI_DOUBLE, MPI_SUM, c);
  std::vector<double> mine;
  for (int k = 0; k < n; k++)
    if (k != me) mine.push_back(rate[(size_t)std::min(me, k) * n + std::max(me, k)]);
  return median(mine);
}

// A barrier whose waiting ranks sleep instead of polling: in turn, the
// nodes that wait share the cores of the one measuring (a fake cluster's
// hosts), and MPI's busy wait would take them from it.
void quiet_barrier(MPI_Comm c) {
  MPI_Request r;
  MPI_Ibarrier(c, &r);
  for (int done = 0;;) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// One node's own figures (on its first rank).
void measure_local(NodeFigures& f, Backend& be, const std::string& disk_dir, double disk_mb) {
  auto attempt = [&](const char* what, auto&& measure) {
    try {
      measure();
    } catch (const std::exception& e) {
      if (f.failed.empty()) f.failed = std::string(what) + ": " + e.what();
    }
  };
  // On a GPU the driver's readings while the product runs (its clock under
  // load): three, 80 ms apart, merged (runtime/gpu_state.h).
  const bool gpu = !be.device_name().empty();
  std::vector<NodeGpus> readings;
  std::thread sampler;
  if (gpu)
    sampler = std::thread([&] {
      for (int i = 0; i < 3; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(80));
        readings.push_back(node_gpus(be));
      }
    });
  // Sustained over 0.3 s: a node held to a share of its CPUs (a quota)
  // runs one short product at full speed.
  attempt("gemm", [&] { f.gemm_gflops = measure_gemm_gflops(be, 1024, 0.3, DType::F32, GemmRate::Sustained); });
  if (sampler.joinable()) sampler.join();
  if (gpu) {
    const NodeGpus gpus = merge_readings(readings);
    for (const GpuState& g : gpus.gpus)
      if (g.ran_product && g.sm_clock_mhz > 0) f.gpu_clock_mhz = g.sm_clock_mhz;
    const GpuFault fault = gpu_fault(gpus.gpus);
    f.gpu_fault = fault.text, f.gpu_fails = fault.fails;
    // Said, so that "ok" is not read as "its GPUs were checked".
    if (!gpus.missing.empty()) f.gpu_note = "no GPU figures: " + gpus.missing;
    else if (f.gpu_clock_mhz < 0) f.gpu_note = "no clock figure: the GPU computed on is not among the driver's (NVML's) GPUs";
  }
  attempt("memory", [&] { f.memory_gbps = memory_gbps(); });
  f.free_gb = host_memory().available / 1e9;
  std::error_code ec;
  std::filesystem::create_directories(disk_dir, ec);  // a run's checkpoint directory may not exist yet
  // 32 MB where the disk has room to spare (a figure the nodes' disks can be
  // compared by), else only what a checkpoint of the node's ranks needs: a
  // small disk that holds the checkpoints is not unfit.
  struct statvfs v {};
  const double free_mb = statvfs(disk_dir.c_str(), &v) == 0 ? (double)v.f_bavail * v.f_frsize / (1 << 20) : 0;
  f.disk_mbps = measure_disk(disk_dir, free_mb >= 64 + disk_mb ? std::max(32.0, disk_mb) : disk_mb, &f.disk_error);
  if (f.disk_mbps <= 0 && f.failed.empty())
    f.failed = "cannot write and fsync a file in " + disk_dir +
               (f.disk_error ? " (" + std::string(std::strerror(f.disk_error)) + ")" : std::string());
}

// Fixed-size record for the gather.
struct Wire {
  double v[8];
  int first, leader, gpu_fails, disk_error;
  char host[64], failed[192], gpu_fault[1024], gpu_note[192];
};

}  // namespace

const std::vector<FigureKind>& figure_kinds() {
  static const std::vector<FigureKind> k = {
      {"gemm", "GFLOP/s", &NodeFigures::gemm_gflops},     {"memory", "GB/s", &NodeFigures::memory_gbps},
      {"free memory", "GB", &NodeFigures::free_gb},       {"disk", "MB/s", &NodeFigures::disk_mbps},
      {"all-reduce", "GB/s", &NodeFigures::allreduce_gbps}, {"p2p", "GB/s", &NodeFigures::p2p_gbps},
      {"gpu clock", "MHz", &NodeFigures::gpu_clock_mhz}};
  return k;
}

std::vector<NodeVerdict> judge_nodes(const std::vector<NodeFigures>& nodes, double min_ratio) {
  const auto& kinds = figure_kinds();
  std::vector<double> medians;
  for (const FigureKind& k : kinds) {
    std::vector<double> v;
    for (const NodeFigures& n : nodes)
      if (n.*k.value > 0) v.push_back(n.*k.value);
    medians.push_back(median(v));
  }
  std::vector<NodeVerdict> out(nodes.size());
  for (size_t i = 0; i < nodes.size(); i++) {
    NodeVerdict& verdict = out[i];
    const NodeFigures& n = nodes[i];
    if (!n.failed.empty()) verdict.health = Health::Failed, verdict.reasons.push_back(n.failed);
    if (!n.gpu_fault.empty()) {
      verdict.health = n.gpu_fails ? Health::Failed : verdict.health == Health::Ok ? Health::Slow : verdict.health;
      verdict.reasons.push_back(n.gpu_fault);
      verdict.slow_in.push_back("gpu");
    }
    for (size_t k = 0; k < kinds.size(); k++) {
      const double v = n.*kinds[k].value;
      if (v < 0) {  // not measured (a network figure of a job on one node)
        verdict.ratios.push_back(NAN);
        continue;
      }
      const double ratio = medians[k] > 0 ? v / medians[k] : 1.0;
      verdict.ratios.push_back(ratio);
      if (v == 0 && n.failed.empty()) {
        verdict.health = Health::Failed;
        verdict.reasons.push_back(std::string(kinds[k].name) + ": no figure");
      } else if (ratio < min_ratio && verdict.health != Health::Failed) {
        verdict.health = Health::Slow;
        char why[96];
        std::snprintf(why, sizeof why, "%s %.2f x the median", kinds[k].name, ratio);
        verdict.reasons.push_back(why);
        verdict.slow_in.push_back(kinds[k].name);
      }
    }
  }
  return out;
}

std::vector<NodeVerdict> confirm_verdicts(const std::vector<NodeVerdict>& first,
                                          const std::vector<NodeVerdict>& second) {
  if (first.size() != second.size()) throw std::logic_error("confirm_verdicts: not the same nodes");
  std::vector<NodeVerdict> out = second;
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : "; ") + x;
    return s;
  };
  auto same_cause = [](const NodeVerdict& a, const NodeVerdict& b) {
    if (a.health == Health::Failed || b.health == Health::Failed) return true;  // a failure is no noise
    for (const std::string& x : a.slow_in)
      if (std::find(b.slow_in.begin(), b.slow_in.end(), x) != b.slow_in.end()) return true;
    return false;
  };
  for (size_t i = 0; i < out.size(); i++) {
    if (first[i].health != Health::Ok && out[i].health != Health::Ok && !same_cause(first[i], out[i])) {
      out[i].reasons = {"re-measured: " + joined(first[i].reasons) + " the first time, " + joined(out[i].reasons) +
                        " the second (not the same figure: noise)"};
      out[i].health = Health::Ok, out[i].slow_in.clear();
      continue;
    }
    if (first[i].health == Health::Ok) {  // unfit only the second time: not confirmed either
      if (out[i].health != Health::Ok) {
        std::string was;
        for (const std::string& s : out[i].reasons) was += (was.empty() ? "" : "; ") + s;
        out[i].health = Health::Ok, out[i].reasons = {"re-measured: ok the first time (" + was + " the second)"};
      }
    } else if (out[i].health == Health::Ok) {
      std::string was;
      for (const std::string& s : first[i].reasons) was += (was.empty() ? "" : "; ") + s;
      out[i].reasons = {"re-measured: " + was + " the first time, ok the second"};
    } else {
      out[i].reasons.push_back("confirmed by a second measurement");
    }
  }
  return out;
}

bool any_unfit(const std::vector<NodeVerdict>& verdicts) {
  for (const NodeVerdict& v : verdicts)
    if (v.health != Health::Ok) return true;
  return false;
}

std::string shared_disk_failure(const std::vector<NodeFigures>& nodes, const std::string& disk_dir, double disk_mb,
                                int* code) {
  if (nodes.empty() || nodes[0].disk_error == 0) return "";
  for (const NodeFigures& n : nodes)
    if (n.disk_error != nodes[0].disk_error) return "";
  const int e = nodes[0].disk_error;
  *code = e == ENOSPC || e == EDQUOT ? kExitNoSpace : kExitUsage;
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.0f", disk_mb);
  return std::string("the checkpoint directory ") + disk_dir + " cannot take a " + mb + " MB file (what a checkpoint "
         "of a node's ranks needs) on any of the " + std::to_string(nodes.size()) + " node(s): " + std::strerror(e) +
         ". That is the directory's file system, not the nodes: " +
         (*code == kExitNoSpace ? "free space there" : "make it writable") + " or set checkpoint.dir elsewhere";
}

std::vector<NodeFigures> measure_nodes(MPI_Comm world, Backend& be, const std::string& disk_dir, double disk_mb,
                                       bool in_turn) {
  int rank = 0, size = 0, local = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  MPI_Comm node, leaders;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_split(world, local == 0 ? 0 : MPI_UNDEFINED, rank, &leaders);
  NodeFigures f;
  f.first_rank = rank;
  f.host = host_name();
  if (local == 0) {
    int nodes = 1, me = 0;
    MPI_Comm_size(leaders, &nodes);
    MPI_Comm_rank(leaders, &me);
    for (int turn = 0; turn < (in_turn ? nodes : 1); turn++) {
      if (!in_turn || turn == me) measure_local(f, be, disk_dir, disk_mb);
      if (in_turn) quiet_barrier(leaders);
    }
    // One node: no network between nodes to measure.
    f.allreduce_gbps = nodes > 1 ? allreduce_gbps(leaders) : -1;
    f.p2p_gbps = nodes > 1 ? p2p_gbps(leaders) : -1;
    MPI_Comm_free(&leaders);
  }
  MPI_Comm_free(&node);
  Wire mine{};
  const auto& kinds = figure_kinds();
  if (kinds.size() > std::size(mine.v)) throw std::logic_error("node_health: more figures than the gather carries");
  for (size_t k = 0; k < kinds.size(); k++) mine.v[k] = f.*kinds[k].value;
  mine.first = rank, mine.leader = local == 0;
  std::snprintf(mine.host, sizeof mine.host, "%s", f.host.c_str());
  std::snprintf(mine.failed, sizeof mine.failed, "%s", f.failed.c_str());
  std::snprintf(mine.gpu_fault, sizeof mine.gpu_fault, "%s", f.gpu_fault.c_str());
  std::snprintf(mine.gpu_note, sizeof mine.gpu_note, "%s", f.gpu_note.c_str());
  mine.gpu_fails = f.gpu_fails, mine.disk_error = f.disk_error;
  std::vector<Wire> all(size);
  MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, world);
  std::vector<NodeFigures> out;
  for (const Wire& w : all) {
    if (!w.leader) continue;
    NodeFigures n;
    for (size_t k = 0; k < kinds.size(); k++) n.*kinds[k].value = w.v[k];
    n.first_rank = w.first, n.host = w.host, n.failed = w.failed, n.gpu_fault = w.gpu_fault, n.gpu_fails = w.gpu_fails;
    n.gpu_note = w.gpu_note, n.disk_error = w.disk_error;
    out.push_back(n);
  }
  return out;
}

}  // namespace trainer
