#pragma once
// Preemption: SIGTERM and SIGUSR1 (what Slurm sends before it takes nodes
// back, see scripts/slurm/train.sbatch) only record that a stop was asked
// for; the training loop polls it at step boundaries, where all ranks agree
// on it and save a checkpoint. The recorded signal is process-wide by nature
// (a signal handler can reach nothing else).
#include <string>

namespace trainer {

// SIGTERM and SIGUSR1; with interrupt, SIGINT too (the supervisor: Ctrl-C
// stops the job with a checkpoint).
void install_stop_signals(bool interrupt = false);
int stop_signal();            // the last one received, or 0

// Text the handler writes to stderr, at once, when a stop signal arrives:
// rank 0 keeps it naming the newest committed checkpoint, so a user whose
// launcher kills the ranks before they can save (mpirun does, about a second
// after SIGTERM or Ctrl-C) still learns what is safe. "" writes nothing.
void set_stop_note(const std::string& text);

// SIGUSR2 asks a rank to write its flight recorder now (the supervisor sends
// it through the launcher before it kills a job it found hung); the watchdog
// thread polls the count and dumps once per request.
void install_dump_signal();
int dump_requests();          // SIGUSR2s received so far

}  // namespace trainer
