#pragma once
// Error types and the process exit codes they map to. The supervisor
// (app/cmd_supervise.cpp) decides from the exit code whether a retry can help, so every
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
