#pragma once
// <run.dir>/events.jsonl, the protocol between the job's ranks, `trainer
// health`, the supervisor and its readers (`trainer status`, `trainer
// report`, the supervisor itself): every event that crosses a process is a
// struct here, its fields declared once (fields(): a JSON name beside each
// member), its kind with it. Writers build records with record(); readers
// take them apart with read<E>() and head(); no other code names a field.
//
// A record is one JSON object per line: the head (time, event, launch,
// message) and the kind's own fields. A field a record lacks keeps its
// default (records from older trainers); a std::optional field is written
// only when set.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/metrics.h"

namespace trainer::events {

// Every record's head: when (UTC, ISO 8601), what, the supervisor's launch
// number, and the sentence for people.
struct Head {
  std::string time, event;
  long launch = -1;
  std::string message;
  template <class F>
  void fields(F&& f) {
    f("time", time), f("event", event), f("launch", launch), f("message", message);
  }
};

// --- Written by the job's rank 0 (engine/stragglers.cpp) ---

// A straggler report: ranks whose compute time exceeds what their stage
// should take by runtime.straggler_factor over a window of steps.
struct Straggler {
  static constexpr const char* kKind = "straggler";
  long step = 0, window_steps = 0;
  long window = 0;  // of this launch, from 1
  std::vector<double> ranks;
  std::vector<std::string> hosts;  // each rank's
  std::vector<double> ratios, compute_ms;
  double median_ms = 0;
  template <class F>
  void fields(F&& f) {
    f("step", step), f("window_steps", window_steps), f("window", window), f("ranks", ranks), f("hosts", hosts),
        f("ratios", ratios), f("compute_ms", compute_ms), f("median_ms", median_ms);
  }
};

// Throughput below runtime.throughput_drop of the launch's early baseline.
struct ThroughputDrop {
  static constexpr const char* kKind = "throughput_drop";
  long step = 0;
  double ratio = 0;
  std::string grew;  // the part of the step that grew most
  double grew_ms = 0, step_ms = 0, baseline_step_ms = 0;
  std::optional<long> straggler_rank{};  // a straggler named in the same window
  template <class F>
  void fields(F&& f) {
    f("step", step), f("ratio", ratio), f("grew", grew), f("grew_ms", grew_ms), f("step_ms", step_ms),
        f("baseline_step_ms", baseline_step_ms), f("straggler_rank", straggler_rank);
  }
};

// --- Written by `trainer health` (planning/health_check.cpp) ---

struct UnfitNode {
  static constexpr const char* kKind = "unfit_node";
  std::vector<std::string> hosts;
  std::string why;
  template <class F>
  void fields(F&& f) {
    f("hosts", hosts), f("why", why);
  }
};

// --- Written by the supervisor (supervise/) ---

// Kinds with no fields of their own.
template <const char* const* K>
struct Plain {
  static constexpr const char* kKind = *K;
  template <class F>
  void fields(F&&) {}
};
inline constexpr const char* kLingering = "lingering";  // a launcher outlived the job's end: stopped
inline constexpr const char* kResumed = "resumed";      // the supervisor itself was stopped a while
inline constexpr const char* kHealthOk = "health_ok";
inline constexpr const char* kPreempted = "preempted";
inline constexpr const char* kDone = "done";
using Lingering = Plain<&kLingering>;
using Resumed = Plain<&kResumed>;
using HealthOk = Plain<&kHealthOk>;
using Preempted = Plain<&kPreempted>;
using Done = Plain<&kDone>;

struct Allocation {
  static constexpr const char* kKind = "allocation";
  std::vector<std::string> hosts, spares;
  long nodes = 0;
  template <class F>
  void fields(F&& f) {
    f("hosts", hosts), f("nodes", nodes), f("spares", spares);
  }
};

struct Start {
  static constexpr const char* kKind = "start";
  std::string command;
  template <class F>
  void fields(F&& f) {
    f("command", command);
  }
};

struct NotStarted {
  static constexpr const char* kKind = "not_started";
  std::vector<std::string> hosts;  // whose ranks never started
  template <class F>
  void fields(F&& f) {
    f("hosts", hosts);
  }
};

struct Signal {
  static constexpr const char* kKind = "signal";
  long signal = 0;
  template <class F>
  void fields(F&& f) {
    f("signal", signal);
  }
};

// run.dir cannot take a heartbeat (reason), or the health check found
// checkpoint.dir full on every host (code).
struct DiskFull {
  static constexpr const char* kKind = "disk_full";
  std::optional<std::string> reason{};
  std::optional<long> code{};
  template <class F>
  void fields(F&& f) {
    f("reason", reason), f("code", code);
  }
};

struct Hang {
  static constexpr const char* kKind = "hang";
  double since_heartbeat_s = 0;
  template <class F>
  void fields(F&& f) {
    f("since_heartbeat_s", since_heartbeat_s);
  }
};

// A straggler host named in supervisor.straggler_windows reports in a row:
// swapped (straggler_swap), kept (straggler_kept: no spare, or not the
// launch's), or on ranks an earlier swap moved (straggler_follows_rank,
// with that swap).
struct StragglerRunFields {
  std::string host;
  std::vector<double> ranks, steps, ratios, compute_ms;
  std::optional<std::string> swapped_host{};
  std::optional<long> swapped_launch{}, swapped_step{}, standing{};
  template <class F>
  void fields(F&& f) {
    f("host", host), f("ranks", ranks), f("steps", steps), f("ratios", ratios), f("compute_ms", compute_ms),
        f("swapped_host", swapped_host), f("swapped_launch", swapped_launch), f("swapped_step", swapped_step),
        f("standing", standing);
  }
};
template <const char* const* K>
struct StragglerRunEvent : StragglerRunFields {
  static constexpr const char* kKind = *K;
};
inline constexpr const char* kStragglerSwap = "straggler_swap";
inline constexpr const char* kStragglerKept = "straggler_kept";
inline constexpr const char* kStragglerFollowsRank = "straggler_follows_rank";
using StragglerSwap = StragglerRunEvent<&kStragglerSwap>;
using StragglerKept = StragglerRunEvent<&kStragglerKept>;
using StragglerFollowsRank = StragglerRunEvent<&kStragglerFollowsRank>;

// What a straggler swap cost (none measured when the relaunch ended before
// its first step: only the message).
struct SwapDone {
  static constexpr const char* kKind = "swap_done";
  std::optional<std::string> host{};
  std::optional<std::vector<std::string>> spares_in{};
  std::optional<double> seconds{};
  std::optional<long> steps_redone{}, last_step{}, resume_step{};
  template <class F>
  void fields(F&& f) {
    f("host", host), f("spares_in", spares_in), f("seconds", seconds), f("steps_redone", steps_redone),
        f("last_step", last_step), f("resume_step", resume_step);
  }
};

struct Exit {
  static constexpr const char* kKind = "exit";
  long code = 0;
  double seconds = 0;
  std::string meaning;
  template <class F>
  void fields(F&& f) {
    f("code", code), f("seconds", seconds), f("meaning", meaning);
  }
};

struct Crash {
  static constexpr const char* kKind = "crash";
  long rank = -1;
  std::string summary, file;
  template <class F>
  void fields(F&& f) {
    f("rank", rank), f("summary", summary), f("file", file);
  }
};

struct Diagnosis {
  static constexpr const char* kKind = "diagnosis";
  std::string verdict, culprit, report;
  template <class F>
  void fields(F&& f) {
    f("verdict", verdict), f("culprit", culprit), f("report", report);
  }
};

struct StartProbe {
  static constexpr const char* kKind = "start_probe";
  std::vector<std::string> failed, results;
  template <class F>
  void fields(F&& f) {
    f("failed", failed), f("results", results);
  }
};

struct UnknownHost {
  static constexpr const char* kKind = "unknown_host";
  std::vector<std::string> hosts;
  std::string why;
  template <class F>
  void fields(F&& f) {
    f("hosts", hosts), f("why", why);
  }
};

// Hosts excluded: spares in (replace), none left (no_spare: given up,
// shrink refused, or waiting), or the job shrunk to the hosts left (shrink).
struct HostsExcludedFields {
  std::vector<std::string> excluded;
  std::string why;
  std::vector<std::string> spares_in, hosts, spares_left;
  std::optional<long> resume_step{};
  std::optional<std::string> shrink_refused{};
  std::optional<double> wait_s{};
  std::optional<long> nodes{}, ranks{}, dp{}, accum_steps{};  // the smaller job's
  template <class F>
  void fields(F&& f) {
    f("excluded", excluded), f("why", why), f("spares_in", spares_in), f("hosts", hosts),
        f("spares_left", spares_left), f("resume_step", resume_step), f("shrink_refused", shrink_refused),
        f("wait_s", wait_s), f("nodes", nodes), f("ranks", ranks), f("dp", dp), f("accum_steps", accum_steps);
  }
};
template <const char* const* K>
struct HostsExcludedEvent : HostsExcludedFields {
  static constexpr const char* kKind = *K;
};
inline constexpr const char* kReplace = "replace";
inline constexpr const char* kNoSpare = "no_spare";
inline constexpr const char* kShrink = "shrink";
using Replace = HostsExcludedEvent<&kReplace>;
using NoSpare = HostsExcludedEvent<&kNoSpare>;
using ShrinkEvent = HostsExcludedEvent<&kShrink>;

// `trainer health` run by the supervisor: before a launch on the usable
// hosts, or on an excluded `host` beside them while waiting for hosts.
struct HealthCheck {
  static constexpr const char* kKind = "health_check";
  std::optional<std::string> host{};
  std::vector<std::string> hosts;
  std::string command;
  template <class F>
  void fields(F&& f) {
    f("host", host), f("hosts", hosts), f("command", command);
  }
};

struct HealthFailed {
  static constexpr const char* kKind = "health_failed";
  std::optional<std::string> host{};
  long code = 0;
  template <class F>
  void fields(F&& f) {
    f("host", host), f("code", code);
  }
};

struct Readmit {
  static constexpr const char* kKind = "readmit";
  std::string host;
  double waited_s = 0;
  template <class F>
  void fields(F&& f) {
    f("host", host), f("waited_s", waited_s);
  }
};

struct FitAgain {
  static constexpr const char* kKind = "fit_again";
  std::string host;
  template <class F>
  void fields(F&& f) {
    f("host", host);
  }
};

struct GiveUp {
  static constexpr const char* kKind = "give_up";
  long code = 0;
  std::optional<double> waited_s{};
  template <class F>
  void fields(F&& f) {
    f("code", code), f("waited_s", waited_s);
  }
};

struct Paused {
  static constexpr const char* kKind = "paused";
  long step = 0;
  template <class F>
  void fields(F&& f) {
    f("step", step);
  }
};

struct Restart {
  static constexpr const char* kKind = "restart";
  long restart = 0;  // restarts counted so far
  double delay_s = 0;
  long on_spares = 0;  // 1: a relaunch on spares, not counted
  template <class F>
  void fields(F&& f) {
    f("restart", restart), f("delay_s", delay_s), f("on_spares", on_spares);
  }
};

// --- Writing and reading ---

namespace detail {
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
}  // namespace detail

// A record's head: the time now, the kind, the launch, the message.
JsonRecord head_record(const char* kind, long launch, const std::string& message);

// The record of event `e` of `launch`, said as `message`, with the time now.
template <class E>
JsonRecord record(E e, long launch, const std::string& message) {
  JsonRecord r = head_record(E::kKind, launch, message);
  e.fields([&](const char* name, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (detail::is_optional<T>::value) {
      if (v) r.add(name, *v);
    } else {
      r.add(name, v);
    }
  });
  return r;
}

// A record's fields into `into`: false when one it has is of another type.
template <class E>
bool parse_fields(const nlohmann::json& j, E& into) {
  bool ok = j.is_object();
  if (ok)
    into.fields([&](const char* name, auto& v) {
      const auto it = j.find(name);
      if (it == j.end() || it->is_null()) return;
      try {
        using T = std::decay_t<decltype(v)>;
        if constexpr (detail::is_optional<T>::value) v = it->template get<typename T::value_type>();
        else v = it->template get<T>();
      } catch (const nlohmann::json::exception&) {
        ok = false;
      }
    });
  return ok;
}

// Every record's head (a field of another type left at its default).
inline Head head(const nlohmann::json& j) {
  Head h;
  parse_fields(j, h);
  return h;
}

// The record as event E: none when it is another kind, or a field it has is
// of another type than E declares (not a record this reader understands).
template <class E>
std::optional<E> read(const nlohmann::json& j) {
  if (head(j).event != E::kKind) return std::nullopt;
  E e;
  if (!parse_fields(j, e)) return std::nullopt;
  return e;
}

// Whether the record is of kind E.
template <class E>
bool is(const nlohmann::json& j) {
  return head(j).event == E::kKind;
}

}  // namespace trainer::events
