#pragma once
// Reading the flight recorders the watchdog wrote (<run.dir>/flight/
// rank_NNNNN.json, runtime/flight_recorder.h): which rank the others wait
// for, on which call, and what it was doing. `trainer diagnose` prints the
// report; `trainer supervise` puts the verdict in its event log.
#include <string>
#include <vector>

namespace trainer {

// A rank that died of a signal and left runtime/crash_report.h's file.
struct CrashReport {
  int rank = -1;
  std::string summary;  // "rank 3 (pid 123) died of signal 11 (SIGSEGV, ...) in training of step 7"
  std::string path;     // the file, with the backtrace
  std::string host;     // where the rank ran ("" in reports from before hosts were written)
};

struct Diagnosis {
  std::vector<CrashReport> crashes;  // of the newest job, by rank
  int dumps = 0;         // recorders read (of the newest job); 0: nothing to say
  bool named = false;    // a rank behind, or collectives made in a different order, was found
  std::string verdict;   // one line: "rank 1 is behind." / "no single rank is behind: ..."
  std::string culprit;   // what the rank behind was doing (one line per rank), "" if none named
  std::string report;    // the whole table and explanation
  std::vector<std::string> warnings;  // unreadable dumps, skipped
  // The hosts the evidence blames, with why (`trainer supervise` excludes
  // them when it has spares): the host of ranks whose link went down or that
  // no other host reached (the watchdogs' network probes; also ranks that
  // left no dump, named from the probes' records), or the one host every
  // crash of the job came from when they are SIGBUS or SIGILL. Empty when no host is named.
  std::vector<std::string> hosts;
  std::string host_why;  // "link eth1 down (the watchdogs' network probes)"
};

// Whether a watchdog of a job started after `newer_than` ended that job (its
// dump says "ends_job"), and whether a dump's network probe found a host
// unreached or a link down. A supervisor whose launcher is still running
// long after is waiting on a lost host; with the probes' word, at once.
enum class JobEnd { Running, Ended, EndedHostLost };
JobEnd watchdog_ended_job(const std::string& run_dir, double newer_than);

// Reads run_dir/flight/rank_*.json and crash_rank_*.txt; only the newest
// job's, and only of jobs that started after `newer_than` (seconds since the
// epoch).
Diagnosis diagnose_run(const std::string& run_dir, double newer_than = 0);

}  // namespace trainer
