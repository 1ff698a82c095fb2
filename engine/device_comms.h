#pragma once
// Which data communicator each process group gets for the run's backend:
// MPI on host memory for the CPU backend; on GPUs nothing for a group of one
// rank (parallel/solo_communicator.h), NCCL for the collective groups and,
// for the pipeline group (whose messages are told apart by tag), MPI through
// pinned host staging. When more ranks than GPUs share a node,
// NCCL cannot run (it refuses two ranks on one GPU): every group then goes
// through the staged MPI path, and rank 0 says so.
#include "parallel/process_grid.h"
#include "runtime/backend.h"

namespace trainer {

ProcessGrid::DataCommMaker data_comms_for(Backend& be, int ranks_on_node, bool say);

}  // namespace trainer
