#pragma once
// Preemption: SIGTERM and SIGUSR1 (what Slurm sends before it takes nodes
// back, see scripts/slurm/train.sbatch) only record that a stop was asked
// for; the training loop polls it at step boundaries, where all ranks agree
// on it and save a checkpoint. The recorded signal is process-wide by nature
// (a signal handler can reach nothing else).
namespace trainer {

// SIGTERM and SIGUSR1; with interrupt, SIGINT too (the supervisor: Ctrl-C
// stops the job with a checkpoint).
void install_stop_signals(bool interrupt = false);
int stop_signal();            // the last one received, or 0

}  // namespace trainer
