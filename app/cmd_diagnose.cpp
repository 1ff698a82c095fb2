// `trainer diagnose RUN_DIR`: prints what supervise/diagnosis.h finds in the flight
// recorders the watchdog wrote: the rank the others are waiting for, the call
// on which they disagree, and what that rank was doing.
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "supervise/diagnosis.h"
#include "runtime/errors.h"

namespace trainer {

namespace {

const char* kDiagnoseUsage =
    "usage: trainer diagnose RUN_DIR\n"
    "  Reads RUN_DIR/flight/rank_*.json (written by each rank's watchdog when a call stays\n"
    "  in flight longer than runtime.comm_timeout, or on SIGUSR2) and names the rank that is\n"
    "  behind, the call the others wait in, and what that rank was doing. Exit 0: a rank\n"
    "  was named; 1: no single culprit (the report says why); 2: no dumps or bad arguments.\n";

}  // namespace

int cmd_diagnose(int argc, char** argv) {
  if (argc != 1 || std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h") {
    std::fputs(kDiagnoseUsage, argc == 1 ? stdout : stderr);
    return argc == 1 ? kExitOk : kExitUsage;
  }
  const Diagnosis d = diagnose_run(argv[0]);
  for (const std::string& w : d.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (d.dumps == 0 && d.crashes.empty()) {
    std::fprintf(stderr, "error: no flight recorder dumps or crash reports in %s/flight (the watchdog writes "
                         "dumps when runtime.comm_timeout expires or on SIGUSR2, a rank that dies of a signal "
                         "writes a crash report; is this the run's [run] dir?)\n", argv[0]);
    return kExitUsage;
  }
  std::fputs(d.report.c_str(), stdout);
  if (d.dumps == 0) std::printf("verdict: %s %s\n", d.verdict.c_str(), d.culprit.c_str());
  return d.named ? kExitOk : 1;
}

}  // namespace trainer
