#pragma once
// Subcommands of the trainer executable. Each takes the arguments after its
// own name and returns the process exit code (runtime/errors.h).
namespace trainer {

int cmd_train(int argc, char** argv);
int cmd_data(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_ckpt(int argc, char** argv);
int cmd_diagnose(int argc, char** argv);
int cmd_supervise(int argc, char** argv);
int cmd_status(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_calibrate(int argc, char** argv);
int cmd_smoke(int argc, char** argv);
int cmd_health(int argc, char** argv);

// The body of `trainer train` between MPI_Init and MPI_Finalize, with the
// arguments after "train": what `trainer smoke` runs in its own process.
int train_job(int argc, char** argv, int rank, int size);
int cmd_version();

}  // namespace trainer
