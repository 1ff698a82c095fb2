// Every collective has a per-group sequence number, so the members of a group
// must make their n-th call on it together. A rank in flight in call n of a
// group waits for every member that has started fewer than n calls there; a
// rank waiting for a point-to-point transfer waits for its peer. Following
// "waits for" from the stuck ranks ends at the rank(s) that are behind.
#include "supervise/diagnosis.h"
#include "runtime/regular_file.h"
#include "runtime/replace_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace trainer {

namespace {

using nlohmann::json;

struct RankDump {
  int rank = -1;
  long step = 0;
  double time = 0;
  double stalled_s = 0;  // its process was stopped this long (the watchdog's polls stopped)
  bool stall_ended = false;  // dumped as it came back from that stop: the stop is this job's end
  bool fault = false;
  std::string reason, phase;  // phase: what it did between calls ("checkpoint save of step 10")
  std::string host;
  json groups, calls;
  const json* in_flight = nullptr;  // the call not yet returned, if any
  // What its watchdog's network probe found (runtime/peer_probe.h), if it ran.
  bool probed = false;
  std::vector<std::string> links_down;
  std::set<int> reached, unreached, host_ranks;
  std::map<int, std::string> probed_hosts;  // the probed ranks' host names
};

std::string describe(const RankDump& d, const json& call) {
  const json& g = d.groups.at(call.at("group").get<int>());
  const std::string op = call.at("op");
  char b[256];
  if (call.at("group_seq").get<long>() > 0)
    std::snprintf(b, sizeof b, "%s %s #%ld (%zu bytes)", g.at("name").get<std::string>().c_str(), op.c_str(),
                  call.at("group_seq").get<long>(), call.at("bytes").get<size_t>());
  else
    std::snprintf(b, sizeof b, "%s %s %s rank %d (%zu bytes)", g.at("name").get<std::string>().c_str(), op.c_str(),
                  op == "wait_recv" || op == "irecv" ? "from" : "to", call.at("peer").get<int>(),
                  call.at("bytes").get<size_t>());
  return b;
}

std::string members_key(const json& g) {
  std::string k = g.at("name").get<std::string>() + ":";
  for (int m : g.at("members")) k += std::to_string(m) + ",";
  return k;
}

std::string rank_list(const std::set<int>& s) {
  std::string out;
  for (int r : s) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// printf into a string.
std::string format(const char* fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s((size_t)std::max(n, 0), '\0');
  std::vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

// What the flight directory holds: dumps and crash reports, each with the
// start time of the job that wrote it.
struct FlightFiles {
  std::vector<std::pair<double, RankDump>> dumps;
  std::vector<std::pair<double, CrashReport>> crashes;
};

// Line 1: the summary; line 2: "job_start_us N"; line 3: "host NAME"
// (reports written before hosts were lack it); then the backtrace.
void read_crash_report(const std::filesystem::path& path, double newer_than, FlightFiles& f) {
  if (!not_regular_file(path.string()).empty()) return;  // no rank writes a FIFO here
  std::ifstream in(path);
  CrashReport c;
  std::string key;
  long long us = 0;
  if (std::getline(in, c.summary) && (in >> key >> us) && key == "job_start_us" && us * 1e-6 > newer_than) {
    if ((in >> key) && key == "host") in >> c.host;
    c.rank = std::atoi(path.filename().string().c_str() + std::strlen("crash_rank_"));
    c.path = path.string();
    f.crashes.push_back({us * 1e-6, c});
  }
}

void read_dump(const std::filesystem::path& path, double newer_than, FlightFiles& f) {
  if (const std::string why = not_regular_file(path.string()); !why.empty())
    throw std::runtime_error(why);
  std::ifstream in(path);
  const json j = json::parse(in);
  RankDump d;
  d.rank = j.at("rank");
  d.step = j.at("step");
  d.time = j.at("time");
  d.fault = j.value("stopped_by_fault_injection", false);
  d.reason = j.value("reason", "");
  d.phase = j.value("phase", "");
  d.host = j.value("host", "");
  d.stalled_s = j.value("process_stalled_s", 0.0);
  d.stall_ended = j.value("stall_ended", false);
  d.groups = j.at("groups");
  d.calls = j.at("calls");
  if (j.contains("network")) {
    const json& n = j.at("network");
    d.probed = true;
    d.links_down = n.at("links_down").get<std::vector<std::string>>();
    d.reached = n.at("reached").get<std::set<int>>();
    d.unreached = n.at("unreached").get<std::set<int>>();
    d.host_ranks = n.at("host_ranks").get<std::set<int>>();
    if (n.contains("hosts"))
      for (const auto& [r, h] : n.at("hosts").items()) d.probed_hosts[std::atoi(r.c_str())] = h.get<std::string>();
  }
  const double start = j.at("job_start");
  if (start > newer_than) f.dumps.push_back({start, std::move(d)});
}

FlightFiles read_flight_dir(const std::string& dir, double newer_than, Diagnosis& out) {
  FlightFiles f;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("crash_rank_", 0) == 0 && e.path().extension() == ".txt") {
      read_crash_report(e.path(), newer_than, f);
      continue;
    }
    if (n.rfind("rank_", 0) != 0 || e.path().extension() != ".json") continue;
    try {
      read_dump(e.path(), newer_than, f);
    } catch (const std::exception& ex) {
      out.warnings.push_back(e.path().string() + ": unreadable flight recorder, skipped: " + ex.what());
    }
  }
  return f;
}

// Only the newest job's files: older ones are from earlier launches. Fills
// out.crashes (by rank) and returns the dumps by rank.
std::map<int, RankDump> newest_job(FlightFiles& f, Diagnosis& out) {
  double newest = 0;
  for (auto& [start, d] : f.dumps) newest = std::max(newest, start);
  for (auto& [start, c] : f.crashes) newest = std::max(newest, start);
  const auto same_job = [&](double start) { return std::abs(start - newest) < 1e-3; };
  for (auto& [start, c] : f.crashes)
    if (same_job(start)) out.crashes.push_back(c);
  std::sort(out.crashes.begin(), out.crashes.end(),
            [](const CrashReport& a, const CrashReport& b) { return a.rank < b.rank; });
  for (const CrashReport& c : out.crashes) out.report += "crash: " + c.summary + " (backtrace: " + c.path + ")\n";
  std::map<int, RankDump> dumps;
  for (auto& [start, d] : f.dumps)
    if (same_job(start)) dumps[d.rank] = std::move(d);
  // The call each rank is stuck in: its oldest one not completed (a queued
  // data collective that never completes is older than the calls after it).
  for (auto& [r, d] : dumps)
    for (const json& c : d.calls)
      if (!d.in_flight && c.at("end").is_null() && c.at("op") != "isend" && c.at("op") != "irecv") d.in_flight = &c;
  return dumps;
}

// Calls on which members of one group disagree: the same sequence number
// with another operation or size (a collective-order bug, not a slow rank).
std::vector<std::string> order_mismatches(std::map<int, RankDump>& dumps) {
  std::map<std::pair<std::string, long>, std::pair<int, const json*>> seen;
  std::vector<std::string> mismatches;
  for (auto& [r, d] : dumps)
    for (const json& c : d.calls) {
      const long q = c.at("group_seq");
      if (q == 0) continue;
      const std::string key = members_key(d.groups.at(c.at("group").get<int>()));
      auto [it, fresh] = seen.insert({{key, q}, {r, &c}});
      if (fresh) continue;
      const json& o = *it->second.second;
      if (o.at("op") != c.at("op") || o.at("bytes") != c.at("bytes"))
        mismatches.push_back("ranks " + std::to_string(it->second.first) + " and " + std::to_string(r) +
                             " disagree on call #" + std::to_string(q) + " of group " + key + ": " +
                             describe(dumps[it->second.first], o) + " vs " + describe(d, c));
    }
  return mismatches;
}

// One rank's line of the table: the call it waits in (and whom that waits
// for, into waits_for) or what it did since its last call.
std::string rank_state(int r, const RankDump& d, const std::map<std::string, std::map<int, long>>& started,
                       std::map<int, std::set<int>>& waits_for) {
  std::string state;
  if (d.in_flight) {
    const json& c = *d.in_flight;
    const json& g = d.groups.at(c.at("group").get<int>());
    const long q = c.at("group_seq");
    state = format("waiting %.1f s in ", d.time - c.at("start").get<double>()) + describe(d, c) +
            (d.phase.empty() ? "" : ", in " + d.phase);
    if (q > 0) {
      const auto& st = started.at(members_key(g));
      for (int m : g.at("members"))
        if (m != r && (!st.count(m) || st.at(m) < q)) waits_for[r].insert(m);
    } else if (c.at("peer").get<int>() >= 0) {
      waits_for[r].insert(c.at("peer").get<int>());
    }
  } else {
    state = "not in a communication call" + (d.phase.empty() ? "" : " (" + d.phase + ")");
    if (!d.calls.empty()) {
      const json& last = d.calls.back();
      state += format(" for %.1f s", d.time - last.value("end", last.at("start")).get<double>()) +
               "; last call " + describe(d, last);
    }
    if (d.fault) state += " (stopped by fault injection)";
  }
  if (d.stalled_s > 0) state += format(" [process stopped for %.1f s]", d.stalled_s);
  return state;
}

// Follows the waits from every waiting rank to the ranks that wait for no
// one. Ranks inside the same call look alike; one whose whole process was
// stopped (its watchdog could not run) is what the others wait for. So is
// one whose dump was written as it came back from such a stop, even when
// the dump shows it waiting itself: continued (SIGCONT) just before the job
// is killed, its call may complete (the peers' data had arrived) and the
// next begin before its watchdog gets to run. (A stop earlier in the job,
// whose dump a later one replaced, names no one by itself.)
std::set<int> ranks_behind(std::map<int, RankDump>& dumps, std::map<int, std::set<int>>& waits_for) {
  std::set<int> behind;
  for (auto& [r, targets] : waits_for) {
    std::set<int> visited{r};
    std::vector<int> todo(targets.begin(), targets.end());
    while (!todo.empty()) {
      const int x = todo.back();
      todo.pop_back();
      if (!visited.insert(x).second) continue;
      if (!waits_for.count(x)) behind.insert(x);
      else for (int y : waits_for[x]) todo.push_back(y);
    }
  }
  std::set<int> stalled;
  for (auto& [r, d] : dumps)
    if (d.stalled_s > 0 && (behind.empty() ? d.in_flight != nullptr : behind.count(r) > 0 || d.stall_ended))
      stalled.insert(r);
  return stalled.empty() ? behind : stalled;
}

// What rank b (behind) was doing, and the calls the others wait in for it.
std::string explain_behind(int b, std::map<int, RankDump>& dumps, std::map<int, std::set<int>>& waits_for,
                           std::string& say) {
  for (auto& [r, t] : waits_for) {
    if (!t.count(b) || !dumps[r].in_flight) continue;
    const json& c = *dumps[r].in_flight;
    say += format("  rank %d waits in %s%s, %s\n", r, describe(dumps[r], c).c_str(),
                  dumps[r].phase.empty() ? "" : (" (" + dumps[r].phase + ")").c_str(),
                  c.at("group_seq").get<long>() > 0 ? ("which rank " + std::to_string(b) + " has not joined").c_str()
                                                    : ("which needs rank " + std::to_string(b)).c_str());
  }
  if (!dumps.count(b)) return format("rank %d left no flight recorder", b);
  const RankDump& d = dumps[b];
  if (d.stalled_s > 0)
    return format("rank %d's process was stopped for %.1f s (its watchdog could not run: SIGSTOP, a frozen "
                  "driver call or heavy swapping)%s%s", b, d.stalled_s,
                  d.in_flight ? (" inside " + describe(d, *d.in_flight)).c_str() : "",
                  d.fault ? " (here: by fault injection)" : "");
  if (d.in_flight) return format("rank %d is itself in %s", b, describe(d, *d.in_flight).c_str());
  return format("rank %d is not in any communication call: %s, or stopped there%s", b,
                d.phase.empty() ? "computing" : ("in " + d.phase).c_str(), d.fault ? " (here: by fault injection)" : "");
}

// When no rank is behind: the host whose link is down (its ranks' probes
// say so), else a host no other host could reach. Returns the verdict, or ""
// when the probes name no one (none ran, or two hosts lost each other and
// neither saw its own link go down); either way the probes go into the report.
std::string network_verdict(std::map<int, RankDump>& dumps, std::string& say, std::set<int>& cut_out,
                            std::string& why) {
  std::set<int> cut, probers;
  std::map<int, int> unreached_by, probed_by;
  std::set<std::string> links;
  const auto ranks = [](const std::set<int>& s) { return (s.size() == 1 ? "rank " : "ranks ") + rank_list(s); };
  for (auto& [r, d] : dumps) {
    if (!d.probed) continue;
    probers.insert(r);
    std::string down;
    for (const std::string& l : d.links_down) down += (down.empty() ? "" : ", ") + l, links.insert(l);
    say += format("network: rank %d: %s; reached rank(s) [%s], could not reach [%s]\n", r,
                  down.empty() ? "its links are up" : ("link " + down + " down").c_str(), rank_list(d.reached).c_str(),
                  rank_list(d.unreached).c_str());
    if (!down.empty()) cut.insert(d.host_ranks.begin(), d.host_ranks.end());
    for (int u : d.unreached) unreached_by[u]++, probed_by[u]++;
    for (int u : d.reached) probed_by[u]++;
  }
  if (!cut.empty()) {
    std::set<int> lost;  // ranks elsewhere that could not reach them
    for (auto& [r, d] : dumps)
      for (int u : d.unreached)
        if (!cut.count(r) && cut.count(u)) lost.insert(r);
    std::string down;
    for (const std::string& l : links) down += (down.empty() ? "" : ", ") + l;
    cut_out = cut;
    why = "link " + down + " down (the watchdogs' network probes)";
    return format("the network: %s lost %s link (%s down)%s.", ranks(cut).c_str(), cut.size() == 1 ? "its" : "their",
                  down.c_str(), lost.empty() ? "" : ("; " + ranks(lost) + " could not reach " +
                                                     (cut.size() == 1 ? "it" : "them")).c_str());
  }
  for (auto& [u, n] : probed_by)
    if (unreached_by[u] == n) cut.insert(u);
  if (cut.empty() || std::includes(cut.begin(), cut.end(), probers.begin(), probers.end())) return "";
  cut_out = cut;
  why = "no other host reaches it (the watchdogs' network probes)";
  return format("the network: no other host reaches %s.", ranks(cut).c_str());
}

// The hosts of the ranks in `cut`: each rank's own dump says where it ran;
// a rank without one is on the host of a dump that counted it among its
// host's ranks.
void blame_hosts(const std::map<int, RankDump>& dumps, const std::set<int>& cut, const std::string& why,
                 Diagnosis& out) {
  std::set<std::string> hosts;
  for (int r : cut) {
    if (const auto it = dumps.find(r); it != dumps.end() && !it->second.host.empty()) {
      hosts.insert(it->second.host);
      continue;
    }
    for (const auto& [_, d] : dumps)
      if (d.host_ranks.count(r) && !d.host.empty()) hosts.insert(d.host);
  }
  out.hosts.assign(hosts.begin(), hosts.end());
  if (!hosts.empty()) out.host_why = why;
}

// Ranks behind that left no flight recorder, which every probe that tried
// could not reach: their host was cut off (its ranks could not even write
// their dumps to the shared file system). Named by the probers' records.
void blame_silent_hosts(const std::map<int, RankDump>& dumps, const std::set<int>& behind, Diagnosis& out) {
  std::map<int, int> probed, unreached;
  std::set<std::string> hosts;
  for (const auto& [_, d] : dumps) {
    for (int u : d.unreached) probed[u]++, unreached[u]++;
    for (int u : d.reached) probed[u]++;
  }
  for (int b : behind) {
    if (dumps.count(b) || probed[b] == 0 || unreached[b] != probed[b]) return;
    for (const auto& [_, d] : dumps)
      if (const auto it = d.probed_hosts.find(b); it != d.probed_hosts.end()) hosts.insert(it->second);
  }
  if (hosts.empty()) return;
  out.hosts.assign(hosts.begin(), hosts.end());
  out.host_why = "no other host reaches it and its ranks left no flight recorder (the watchdogs' network probes)";
}

// A crash names its host only when it is the machine's kind (SIGBUS: memory
// or a device gone bad; SIGILL: a CPU that cannot run what every other
// runs) and every crash of the job was on that one host. A segfault, an
// abort or a division by zero is the program's: one rank crashes and the
// launcher kills the rest, so blaming "the only crash's host" would burn
// every spare on a bug that follows the rank.
void blame_crash_host(Diagnosis& out) {
  if (out.crashes.empty() || !out.hosts.empty()) return;
  const std::string& host = out.crashes.front().host;
  for (const CrashReport& c : out.crashes)
    if (c.host.empty() || c.host != host ||
        (c.summary.find("(SIGBUS") == std::string::npos && c.summary.find("(SIGILL") == std::string::npos))
      return;
  out.hosts = {host};
  out.host_why = out.crashes.front().summary + " (its crash report)";
}

Diagnosis diagnose_dumps(const std::string& run_dir, double newer_than) {
  Diagnosis out;
  const std::string dir = run_dir + "/flight";
  FlightFiles files = read_flight_dir(dir, newer_than, out);
  std::map<int, RankDump> dumps = newest_job(files, out);
  out.dumps = (int)dumps.size();
  if (dumps.empty()) {
    if (!out.crashes.empty()) {
      out.named = true;
      out.verdict = out.crashes.front().summary + ".";
      out.culprit = "backtrace in " + out.crashes.front().path;
    }
    return out;
  }
  int world = 0;
  for (auto& [r, d] : dumps)
    for (const json& g : d.groups)
      if (g.at("name") == "world") world = (int)g.at("members").size();
  std::string& say = out.report;
  say += format("flight recorders of %zu of %d ranks in %s\n", dumps.size(), world, dir.c_str());
  // started[group instance][rank]: collectives each member began on it.
  std::map<std::string, std::map<int, long>> started;
  for (auto& [r, d] : dumps)
    for (const json& g : d.groups) started[members_key(g)][r] = g.at("started");
  const std::vector<std::string> mismatches = order_mismatches(dumps);
  std::map<int, std::set<int>> waits_for;  // who waits for whom
  say += "rank  step  state\n";
  for (auto& [r, d] : dumps) say += format("%4d  %4ld  %s\n", r, d.step + 1, rank_state(r, d, started, waits_for).c_str());
  for (int r = 0; r < world; r++)
    if (!dumps.count(r)) say += format("%4d     -  no flight recorder (the process ended before its watchdog fired)\n", r);
  const std::set<int> behind = ranks_behind(dumps, waits_for);
  for (const std::string& m : mismatches) say += "mismatch: " + m + "\n";
  std::set<int> cut;
  std::string why;
  const std::string net = network_verdict(dumps, say, cut, why);
  // A rank cut off the network seems behind when the others finished a call
  // its data reached but it never heard back from: the cut explains it
  // (ranks behind without a dump are named below, by the probers' records).
  const bool cut_explains =
      !net.empty() && mismatches.empty() && std::includes(cut.begin(), cut.end(), behind.begin(), behind.end()) &&
      std::all_of(behind.begin(), behind.end(), [&](int b) { return dumps.count(b) > 0; });
  if (cut_explains) {
    out.named = true;
    out.verdict = net;
    blame_hosts(dumps, cut, why, out);
    if (!behind.empty())
      say += format("rank %s %s behind, cut off\n", rank_list(behind).c_str(), behind.size() == 1 ? "is" : "are");
    say += "verdict: " + net + "\n";
    return out;
  }
  if (behind.empty()) {
    out.verdict = std::string("no single rank is behind: ") +
                  (waits_for.empty() ? "no rank is waiting on another (every member entered its call; look at "
                                       "the network or the communication library)"
                                     : "the waits form a cycle (ranks made collectives in different orders)");
    out.named = !mismatches.empty();
    say += "verdict: " + out.verdict + "\n";
    return out;
  }
  out.named = true;
  blame_silent_hosts(dumps, behind, out);
  out.verdict = format("rank %s %s behind.", rank_list(behind).c_str(), behind.size() == 1 ? "is" : "are");
  say += "verdict: " + out.verdict + "\n";
  for (int b : behind) {
    const std::string what = explain_behind(b, dumps, waits_for, say);
    say += "  " + what + "\n";
    out.culprit += (out.culprit.empty() ? "" : "; ") + what;
  }
  return out;
}

}  // namespace

JobEnd watchdog_ended_job(const std::string& run_dir, double newer_than) {
  bool ended = false, lost = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/flight", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("rank_", 0) != 0 || e.path().extension() != ".json" || mtime_seconds(e.path().string()) < newer_than - 1)
      continue;
    if (!not_regular_file(e.path().string()).empty()) continue;  // a FIFO's open would block
    try {
      std::ifstream in(e.path());
      const json j = json::parse(in);
      if (j.value("job_start", 0.0) <= newer_than) continue;
      ended = ended || j.value("ends_job", false);
      if (const auto n = j.find("network"); n != j.end() && n->is_object())
        lost = lost || !n->value("unreached", json::array()).empty() || !n->value("links_down", json::array()).empty();
    } catch (const std::exception&) {  // half written, or not ours: the diagnosis says so later
    }
  }
  return !ended ? JobEnd::Running : lost ? JobEnd::EndedHostLost : JobEnd::Ended;
}

Diagnosis diagnose_run(const std::string& run_dir, double newer_than) {
  Diagnosis out = diagnose_dumps(run_dir, newer_than);
  blame_crash_host(out);
  for (const std::string& h : out.hosts) out.report += "host at fault: " + h + ": " + out.host_why + "\n";
  return out;
}

}  // namespace trainer
