#pragma once
// What a rank leaves when it dies of a signal it can still catch (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGABRT: a bug, a bad driver call, an uncaught
// exception): a short text file, written from the signal handler with
// async-signal-safe calls only, naming the signal, what the rank was doing
// and its backtrace. Then the signal's default action runs as before (exit
// 128+N, core dump if enabled), so launchers and the supervisor see the same
// exit. `trainer supervise` and `trainer diagnose` read these files
// (supervise/diagnosis.h). SIGKILL (the OOM killer) cannot be caught: no file.
//
// The state is process-wide by nature (a signal handler can reach nothing
// else), like runtime/stop_signal.h.
#include <string>

namespace trainer {

// path: the file to write on a crash (RUN_DIR/flight/crash_rank_NNNNN.txt;
// its directory is made then if missing). job_start: as FlightRecorder::set_job, so a
// reader can tell this job's report from older ones.
void install_crash_report(const std::string& path, int rank, double job_start);
// What the rank is doing now, as FlightRecorder::set_phase: a string
// literal and a step (< 0: none); two stores, no formatting.
void crash_note(const char* what, long step);

}  // namespace trainer
