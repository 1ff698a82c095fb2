#pragma once
// A machine profile: what `trainer calibrate` measured on one machine and
// backend, and what the cost model (planning/step_model.h) prices a layout
// with. Saved as JSON; reusable by `trainer plan --search` and `trainer smoke`.
//
//   ops          op key (planning/op_meter.h) -> median milliseconds per call,
//                measured on one rank with the others idle
//   collectives  "allreduce/4" -> (bytes, ms) points, measured with every
//                group of that size busy at once, as in training
//   compute_units  what the ranks of a node share: CPU cores, or GPUs
#include <map>
#include <string>
#include <vector>

#include "planning/op_meter.h"

namespace trainer {

struct CommPoint {
  double bytes = 0, ms = 0;
};

struct MachineProfile {
  std::string created, host, cpu, backend, device, precision;
  int compute_units = 1;     // cores (CPU backend) or GPUs of a node
  int threads_per_rank = 1;  // a rank's demand on them (1 on a GPU)
  int ranks = 1;             // ranks of the calibration (all on this node)
  // How much of the compute units a rank waiting in a communication call
  // still takes: on the CPU Open MPI's waits poll and yield, so a rank idle
  // in the pipeline bubble keeps part of its share of the cores; a GPU
  // rank's wait leaves its device idle (0).
  double waiting_share = 1;  // 0..1: of a busy rank's demand (measured by calibrate)
  // When more ranks compute than there are units: the factor by which work
  // takes longer than the units' division alone explains (>= 1).
  double sharing_overhead = 1;
  double gemm_gflops = 0;    // one rank's square-GEMM rate alone: MFU's reference
  double disk_mb_per_s = 0;  // writing + fsync of a checkpoint-sized file where calibrate ran
  struct OpFigure {
    double ms = 0;    // median per call
    double work = 0;  // its FLOPs (products, attention) or bytes (the rest)
  };
  std::map<std::string, OpFigure> ops;
  std::map<std::string, std::vector<CommPoint>> collectives;  // sorted by bytes

  // A call's time: its key's measurement, else scaled from the measured key
  // of the same op nearest in work (FLOPs or bytes); `unpriced` counts calls
  // of ops never measured (0 ms).
  double op_time(const OpCall& c, int* unpriced = nullptr) const;
  // A collective's time in a group of `group` ranks (op: "allreduce",
  // "reduce_scatter", "allgather", "send"), interpolated in bytes; a group
  // size not measured is scaled from the nearest measured one by the ring
  // factor (g - 1) / g. -1 when nothing of that op was measured.
  double comm_time(const std::string& op, int group, double bytes) const;
};

MachineProfile load_profile(const std::string& path);  // UserError (exit 2) naming the file and what is wrong
void save_profile(const MachineProfile& p, const std::string& path);
std::string comm_key(const std::string& op, int group);  // "allreduce/4"

}  // namespace trainer
