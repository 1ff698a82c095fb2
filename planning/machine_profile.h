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
#include "runtime/units.h"

namespace trainer {

struct CommPoint {
  double bytes = 0, ms = 0;
  double mib_per_s() const { return mib(bytes) / (ms / 1e3); }
};

// A tensor-parallel collective's wait beyond its own time, by the compute
// between two collectives (both ms; measured by calibrate's measure_tp_sync).
struct SyncPoint {
  double segment_ms = 0, extra_ms = 0;
};
// The size of the all-reduce measure_tp_sync times between pieces of work.
constexpr double kSyncProbeBytes = 16384;

struct MachineProfile {
  std::string created, host, cpu, backend, device, precision;
  int compute_units = 1;     // cores (CPU backend) or GPUs of a node
  int threads_per_rank = 1;  // a rank's demand on them (1 on a GPU)
  int ranks = 1;             // ranks of the calibration (all on this node)
  // busy_slowdown[b - 1]: how much longer a rank's work takes while b of
  // the node's ranks compute and the others wait in communication calls,
  // against one rank alone (measured by calibrate on the CPU, where Open
  // MPI's waits poll and so take part of the cores; empty on a GPU).
  std::vector<double> busy_slowdown;
  // How much the same work's time moved between calibrate's passes (max /
  // min - 1): a host whose speed changes while calibrating gets a profile
  // that misprices layouts against each other.
  double speed_variation = 0;
  double gemm_gflops = 0;    // one rank's square-GEMM rate alone: MFU's reference
  double disk_mb_per_s = 0;  // writing + fsync of a checkpoint-sized file where calibrate ran
  struct OpFigure {
    double ms = 0;    // median per call
    double work = 0;  // its FLOPs (products, attention) or bytes (the rest)
  };
  std::map<std::string, OpFigure> ops;
  std::map<std::string, std::vector<CommPoint>> collectives;  // sorted by bytes
  // tp_sync[g]: in groups of g ranks, what a collective waits for its
  // partners beyond its own time while every rank computes between
  // collectives (sorted by segment; empty on a GPU, where ranks do not
  // share compute units).
  std::map<int, std::vector<SyncPoint>> tp_sync;
  // A real step of one layout (`trainer train`'s own code on every rank)
  // against what the rest of the profile predicted for it: the cost model
  // scales its step times by their ratio, for what op-by-op pricing misses
  // (other threads, the allocator, caches, the host). Absent: 1.
  std::string anchor_layout;
  double anchor_measured_ms = 0, anchor_predicted_ms = 0;
  // What one pipeline action (a chunk's forward or backward of one
  // micro-batch) costs beyond its ops and collectives, alone (ms): posting
  // and waiting on its messages, the switch to another rank and back on
  // shared cores. Set by real steps of the layout with the most actions
  // per step (action_layout), the anchor's factor held. Absent: 0.
  double action_ms = 0;
  std::string action_layout;
  double action_measured_ms = 0;
  double step_factor() const {
    return anchor_measured_ms > 0 && anchor_predicted_ms > 0 ? anchor_measured_ms / anchor_predicted_ms : 1.0;
  }

  // A call's time: its key's measurement, else scaled from the measured key
  // of the same op nearest in work (FLOPs or bytes); `unpriced` counts calls
  // of ops never measured (0 ms).
  double op_time(const OpCall& c, int* unpriced = nullptr) const;
  // The slowdown while `busy` ranks of a node compute (fractions between
  // the measured counts interpolated; beyond them, the last one's times the
  // growth of ranks per unit). Without a table: busy / units, at least 1.
  double slowdown(double busy) const;
  // A collective's time in a group of `group` ranks (op: "allreduce",
  // "reduce_scatter", "allgather", "send"), interpolated in bytes; a group
  // size not measured is scaled from the nearest measured one by the ring
  // factor (g - 1) / g. -1 when nothing of that op was measured.
  double comm_time(const std::string& op, int group, double bytes) const;
  // A tensor-parallel collective's wait for its partners (tp_sync) after
  // `segment_ms` of compute (alone), interpolated and held at the measured
  // ends; a group size not measured takes the nearest one's. 0 without.
  double sync_wait(int group, double segment_ms) const;
};

MachineProfile load_profile(const std::string& path);  // UserError (exit 2) naming the file and what is wrong
// Several calibrations of the same job on the same kind of machine (planning/
// step_model.h's StepModels prices with all of them): each loaded, and a
// UserError (exit 2) when two differ in what makes them price different jobs
// (backend, rank count, compute units, precision).
std::vector<MachineProfile> load_profiles(const std::vector<std::string>& paths);
void save_profile(const MachineProfile& p, const std::string& path);
// Whether `path` loads as a profile: what `calibrate --output` may replace without --force.
bool is_machine_profile(const std::string& path);
std::string comm_key(const std::string& op, int group);  // "allreduce/4"

}  // namespace trainer
