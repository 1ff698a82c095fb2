#pragma once
// `trainer calibrate`'s measurements, written into a MachineProfile
// (planning/machine_profile.h):
//   measure_ops          every op one layer (with the embedding and head) of
//                        each shard shape issues, timed on this rank's backend
//   measure_collectives  all-reduce, reduce-scatter, all-gather, all-to-all
//                        and a ring step for each group size (every group of
//                        that size at once, as training runs them) and
//                        send/receive between pairs, at several message
//                        sizes; collective over `world`
//   measure_sharing      how fixed work slows by the number of ranks computing
//   measure_tp_sync      what a tensor-parallel collective adds between pieces
//                        of compute when every rank computes
//   measure_disk         writing and fsyncing a file where checkpoints go
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "planning/chunk_trace.h"
#include "planning/machine_profile.h"

namespace trainer {

// progress(i, n) after each pass over the shard shapes.
void measure_ops(Backend& be, const ModelConfig& c, const std::vector<ShardShape>& shards, MachineProfile& p,
                 const std::function<void(size_t, size_t)>& progress = {});
// Message sizes in bytes of a rank's buffer; dt the element type sent.
void measure_collectives(MPI_Comm world, const std::vector<int>& groups, const std::vector<double>& sizes, DType dt,
                         MachineProfile& p);
// How ranks share compute units (collective over `world`): how much slower
// fixed work runs while 1, 2, ... size ranks compute and the others wait in
// a receive from them, against one rank alone (busy_slowdown), and how much
// the same work's time moved between rounds (speed_variation).
void measure_sharing(MPI_Comm world, Backend& be, MachineProfile& p);
// What a tensor-parallel collective costs beyond its own time when every
// rank computes between collectives (tp_sync): the partner must have reached
// it, and on shared cores it may not be running. For each group size, fixed
// work with and without a small all-reduce after each piece, at three piece
// sizes; the extra per collective, less the all-reduce's own latency
// (measure_collectives first). Collective over `world`.
void measure_tp_sync(MPI_Comm world, Backend& be, const std::vector<int>& groups, MachineProfile& p);
// A barrier in which this rank sleeps (2 ms polls) instead of spinning, so
// that a rank measuring alone has the cores to itself.
void wait_asleep(MPI_Comm world);
// MB/s; 0 when the directory cannot be written (*error: the errno why).
double measure_disk(const std::string& dir, double megabytes, int* error = nullptr);

}  // namespace trainer
