#include "planning/machine_profile.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include "runtime/errors.h"
#include "runtime/regular_file.h"
#include "runtime/replace_file.h"

namespace trainer {

namespace {

constexpr const char* kProfileFormat = "trainer-machine-profile/3";

double work_of(const OpCall& c) { return c.flops > 0 ? c.flops : c.bytes; }
std::string op_name(const std::string& key) { return key.substr(0, key.find(' ')); }

// Piecewise linear in bytes; below the first point its time (latency),
// beyond the last the last segment's slope (bandwidth).
double interpolate(const std::vector<CommPoint>& pts, double bytes) {
  if (bytes <= pts.front().bytes) return pts.front().ms;
  if (pts.size() == 1) return pts.front().ms * bytes / pts.front().bytes;
  size_t i = 1;
  while (i + 1 < pts.size() && pts[i].bytes < bytes) i++;
  const CommPoint &a = pts[i - 1], &b = pts[i];
  const double slope = (b.ms - a.ms) / (b.bytes - a.bytes);
  return std::max(a.ms, a.ms + slope * (bytes - a.bytes));
}

}  // namespace

std::string comm_key(const std::string& op, int group) { return op + "/" + std::to_string(group); }

double MachineProfile::op_time(const OpCall& c, int* unpriced) const {
  if (auto it = ops.find(c.key); it != ops.end()) return it->second.ms;
  // The same op measured at the nearest amount of work, scaled linearly.
  const double w = work_of(c);
  double best = std::numeric_limits<double>::infinity(), ms = -1;
  for (const auto& [key, f] : ops) {
    if (op_name(key) != c.name || f.work <= 0 || w <= 0) continue;
    const double d = std::fabs(std::log(w / f.work));
    if (d < best) best = d, ms = f.ms * w / f.work;
  }
  if (ms >= 0) return ms;
  if (unpriced && w > 0) ++*unpriced;
  return 0;
}

double MachineProfile::slowdown(double busy) const {
  const double n = (double)busy_slowdown.size();
  if (n == 0) return std::max(1.0, busy / compute_units);
  if (busy <= 1) return 1 + (busy_slowdown[0] - 1) * std::max(0.0, busy);
  if (busy >= n) return busy_slowdown.back() * std::max(1.0, busy / std::max(n, (double)compute_units));
  const size_t i = (size_t)busy;  // between the measured counts i and i + 1
  return busy_slowdown[i - 1] + (busy_slowdown[i] - busy_slowdown[i - 1]) * (busy - i);
}

double MachineProfile::comm_time(const std::string& op, int group, double bytes) const {
  if (group <= 1 || bytes <= 0) return 0;
  if (auto it = collectives.find(comm_key(op, group)); it != collectives.end()) return interpolate(it->second, bytes);
  int nearest = 0;
  for (const auto& [key, pts] : collectives) {
    if (key.rfind(op + "/", 0) != 0) continue;
    const int g = std::stoi(key.substr(op.size() + 1));
    if (!nearest || std::abs(g - group) < std::abs(nearest - group)) nearest = g;
  }
  if (!nearest) return -1;
  // A collective's per-rank traffic grows as (g - 1) / g; a ring step (one
  // block to the next rank) moves the same whatever the group.
  const double scale = op == "ring" ? 1.0 : ((group - 1.0) / group) / ((nearest - 1.0) / nearest);
  return scale * interpolate(collectives.at(comm_key(op, nearest)), bytes);
}

double MachineProfile::sync_wait(int group, double segment_ms) const {
  if (group <= 1 || tp_sync.empty()) return 0;
  auto it = tp_sync.lower_bound(group);  // the nearest measured group size
  if (it == tp_sync.end() || (it != tp_sync.begin() && group - std::prev(it)->first < it->first - group)) --it;
  const std::vector<SyncPoint>& pts = it->second;
  if (pts.empty()) return 0;
  if (segment_ms <= pts.front().segment_ms) return pts.front().extra_ms;
  for (size_t i = 1; i < pts.size(); i++)
    if (segment_ms <= pts[i].segment_ms) {
      const SyncPoint &a = pts[i - 1], &b = pts[i];
      return a.extra_ms + (b.extra_ms - a.extra_ms) * (segment_ms - a.segment_ms) / (b.segment_ms - a.segment_ms);
    }
  return pts.back().extra_ms;
}

bool is_machine_profile(const std::string& path) {
  try {
    load_profile(path);
    return true;
  } catch (const UserError&) {
    return false;
  }
}

MachineProfile load_profile(const std::string& path) {
  if (const std::string why = not_regular_file(path); !why.empty())
    throw UserError(kExitUsage, "the machine profile " + path + " " + why);
  std::ifstream f(path);
  if (!f) throw UserError(kExitUsage, "cannot read the machine profile " + path + " (make one with `trainer calibrate`)");
  MachineProfile p;
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    const std::string format = j.value("format", "");
    if (format.rfind("trainer-machine-profile/", 0) == 0 && format != kProfileFormat)
      throw UserError(kExitUsage, path + " was made by an earlier trainer (" + format +
                                      ": it lacks figures this cost model uses); make a new one with `trainer calibrate`");
    if (format != kProfileFormat)
      throw UserError(kExitUsage, path + " is not a machine profile of this trainer (no \"format\": \"" +
                                      std::string(kProfileFormat) + "\"); make one with `trainer calibrate`");
    p.created = j.value("created", ""), p.host = j.value("host", ""), p.cpu = j.value("cpu", "");
    p.backend = j.value("backend", "cpu"), p.device = j.value("device", ""), p.precision = j.value("precision", "");
    p.compute_units = j.at("compute_units"), p.threads_per_rank = j.at("threads_per_rank"), p.ranks = j.at("ranks");
    p.busy_slowdown = j.value("busy_slowdown", std::vector<double>{});
    p.speed_variation = j.value("speed_variation", 0.0);
    p.gemm_gflops = j.at("gemm_gflops"), p.disk_mb_per_s = j.value("disk_mb_per_s", 0.0);
    p.anchor_layout = j.value("anchor_layout", "");
    p.anchor_measured_ms = j.value("anchor_measured_ms", 0.0), p.anchor_predicted_ms = j.value("anchor_predicted_ms", 0.0);
    p.action_ms = j.value("action_ms", 0.0), p.action_layout = j.value("action_layout", "");
    p.action_measured_ms = j.value("action_measured_ms", 0.0);
    for (const auto& [key, v] : j.at("ops").items()) p.ops[key] = {v.at("ms"), v.at("work")};
    for (const auto& [key, v] : j.at("collectives").items())
      for (const auto& pt : v) p.collectives[key].push_back({pt.at(0), pt.at(1)});
    for (const auto& [key, v] : j.at("tp_sync").items())
      for (const auto& pt : v) p.tp_sync[std::stoi(key)].push_back({pt.at(0), pt.at(1)});
  } catch (const nlohmann::json::exception& e) {
    throw UserError(kExitUsage, "machine profile " + path + " is damaged: " + e.what() +
                                    " (make a new one with `trainer calibrate`)");
  } catch (const std::logic_error&) {  // a group size that is not a number
    throw UserError(kExitUsage, "machine profile " + path + " is damaged: tp_sync has a group size that is not a "
                                    "number (make a new one with `trainer calibrate`)");
  }
  return p;
}

std::vector<MachineProfile> load_profiles(const std::vector<std::string>& paths) {
  std::vector<MachineProfile> ps;
  for (const std::string& path : paths) {
    ps.push_back(load_profile(path));
    const MachineProfile &a = ps.front(), &b = ps.back();
    auto differ = [&](const char* what, const std::string& x, const std::string& y) {
      if (x != y)
        throw UserError(kExitUsage, "machine profiles " + paths.front() + " and " + path + " differ in " + what + " (" +
                                        x + ", " + y + "): give several profiles only of the same job, each made by "
                                        "`mpirun -np N trainer calibrate` with the same N and recipe");
    };
    differ("backend", a.backend, b.backend);
    differ("rank count", std::to_string(a.ranks), std::to_string(b.ranks));
    differ("compute units", std::to_string(a.compute_units), std::to_string(b.compute_units));
    differ("precision", a.precision, b.precision);
  }
  return ps;
}

void save_profile(const MachineProfile& p, const std::string& path) {
  nlohmann::json j;
  j["format"] = kProfileFormat;
  j["created"] = p.created, j["host"] = p.host, j["cpu"] = p.cpu, j["backend"] = p.backend;
  j["device"] = p.device, j["precision"] = p.precision;
  j["compute_units"] = p.compute_units, j["threads_per_rank"] = p.threads_per_rank, j["ranks"] = p.ranks;
  j["busy_slowdown"] = p.busy_slowdown, j["speed_variation"] = p.speed_variation;
  j["gemm_gflops"] = p.gemm_gflops, j["disk_mb_per_s"] = p.disk_mb_per_s;
  j["anchor_layout"] = p.anchor_layout;
  j["anchor_measured_ms"] = p.anchor_measured_ms, j["anchor_predicted_ms"] = p.anchor_predicted_ms;
  j["action_ms"] = p.action_ms, j["action_layout"] = p.action_layout, j["action_measured_ms"] = p.action_measured_ms;
  j["ops"] = nlohmann::json::object();
  for (const auto& [key, f] : p.ops) j["ops"][key] = {{"ms", f.ms}, {"work", f.work}};
  j["collectives"] = nlohmann::json::object();
  for (const auto& [key, pts] : p.collectives)
    for (const CommPoint& c : pts) j["collectives"][key].push_back({c.bytes, c.ms});
  j["tp_sync"] = nlohmann::json::object();
  for (const auto& [g, pts] : p.tp_sync)
    for (const SyncPoint& s : pts) j["tp_sync"][std::to_string(g)].push_back({s.segment_ms, s.extra_ms});
  if (const std::string err = replace_file(path, j.dump(1) + "\n", true); !err.empty())
    throw UserError(kExitUsage, "the machine profile: " + err);
}

}  // namespace trainer
