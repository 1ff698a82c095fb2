#pragma once
// Error types and the process exit codes they map to. The supervisor
// (supervise/decide.h) decides from the exit code whether a retry can help, so every
// failure path ends in one of these codes; README.md documents them.
#include <stdexcept>
#include <string>

namespace trainer {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,   // a bug or an unexpected system error
  kExitUsage = 2,      // bad recipe, bad command line: fix the input, no retry
  kExitData = 3,       // bad or missing data file: fix the data, no retry
  kExitCheckpoint = 4, // unreadable or mismatched checkpoint / HDF5 file
};

// Exit codes of `trainer train` beyond errors (the job's outcome):
constexpr int kExitCommTimeout = 5;  // watchdog: a rank stuck in (or before) a collective
constexpr int kExitBadStep = 6;      // NaN/Inf loss or gradient, or a loss spike, with on_nan / on_spike = "stop"
constexpr int kExitPreempted = 75;   // SIGTERM/SIGUSR1: checkpoint saved, requeue me (EX_TEMPFAIL)
// `trainer supervise`: the restart budget ran out (the job's own code otherwise).
constexpr int kExitGaveUp = 7;
// A run's files cannot be written because their disk is full: `trainer
// train` with checkpoint.required = true, and `trainer supervise` when a
// missing heartbeat is a full disk, not a hang (no restart into it).
constexpr int kExitNoSpace = 8;
// `trainer smoke`: below --min-mfu, slower than --baseline allows, or a
// restart that did not continue bit for bit (--check-restart).
constexpr int kExitSmokeShortfall = 9;
// `trainer health`: a node is slow (below health.min_ratio of the nodes'
// median in a figure) or a measurement on it failed.
constexpr int kExitUnfitNode = 10;

// Every exit code once, with what it means in one line: `trainer --help`
// lists them, the supervisor's events say them, and the README's table is
// checked against them (tests/e2e/readme_keys_check.py). A killed process's
// 128+N is the shell's, not ours.
struct ExitCodeInfo {
  int code;
  const char* meaning;
};
inline constexpr ExitCodeInfo kExitCodes[] = {
    {kExitOk, "finished"},
    {kExitInternal, "internal error (a bug, or an unexpected system error)"},
    {kExitUsage, "recipe or command-line error"},
    {kExitData, "data error"},
    {kExitCheckpoint, "checkpoint or HDF5 error"},
    {kExitCommTimeout, "communication timeout (a rank's watchdog)"},
    {kExitBadStep, "NaN/Inf loss or gradient, or a loss spike, that on_nan / on_spike stop on"},
    {kExitGaveUp, "supervise: the restart budget is used up, or a host was excluded and no spare is left"},
    {kExitNoSpace, "a run file cannot be written (disk full, read-only or over quota)"},
    {kExitSmokeShortfall, "smoke: below --min-mfu, slower than --baseline, or a restart not bit for bit"},
    {kExitUnfitNode, "health: a node is unfit, or a host stopped answering mid-check"},
    {kExitPreempted, "preempted (SIGTERM/SIGUSR1): checkpoint saved, requeue the job"},
};
// The meaning of one of kExitCodes, or nullptr.
inline const char* exit_meaning(int code) {
  for (const ExitCodeInfo& e : kExitCodes)
    if (e.code == code) return e.meaning;
  return nullptr;
}

// A user-facing error: the message names the file, key or offset at fault.
struct UserError : std::runtime_error {
  int exit_code;
  UserError(int code, const std::string& msg) : std::runtime_error(msg), exit_code(code) {}
};

struct RecipeError : UserError {
  explicit RecipeError(const std::string& msg) : UserError(kExitUsage, msg) {}
};
struct DataError : UserError {
  explicit DataError(const std::string& msg) : UserError(kExitData, msg) {}
};
struct CheckpointError : UserError {
  explicit CheckpointError(const std::string& msg) : UserError(kExitCheckpoint, msg) {}
};

}  // namespace trainer
