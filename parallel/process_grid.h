#pragma once
// The process grid: world = dp * pp * cp * tp, ranks ordered with tp fastest,
// then cp, then pp, then dp, so tensor-parallel peers are neighbours and
// context-parallel ones next to them (one node, as Megatron orders them).
// Each group kind gets its own sub-communicator.
#include <mpi.h>

#include <climits>
#include <functional>
#include <initializer_list>
#include <memory>

#include "parallel/mpi_communicator.h"
#include "parallel/recording_communicator.h"

namespace trainer {

struct GridShape {
  // The most ranks a job may have (each size's key and their product are
  // held to it by the recipe rules), so that every product of the sizes
  // fits an int wherever it is used after the recipe is read.
  static constexpr long kMaxRanks = 1048576;
  int dp = 1, pp = 1, tp = 1;
  int cp = 1;  // context parallelism: each sequence cut over cp ranks (parallel/context_chunks.h)
  // In 64 bits, saturated at LONG_MAX: what the rules check, never wrapped.
  long ranks() const { return saturated_product({dp, pp, tp, cp}); }
  long model_ranks() const { return saturated_product({pp, tp, cp}); }  // one model copy: tp * cp * pp
  static long saturated_product(std::initializer_list<long> sizes) {
    long p = 1;
    for (long s : sizes)
      if (__builtin_mul_overflow(p, s, &p)) return LONG_MAX;
    return p;
  }
};

struct GridCoords {
  int dp, pp, tp, cp;
};

// Pure arithmetic, testable without MPI.
GridCoords grid_coords(const GridShape& g, int world_rank);

// Each group has a control communicator (host values) and a data
// communicator (backend buffers) over the same ranks.
class ProcessGrid {
 public:
  // DpCp: the ranks that hold the same weights (dp x cp): where weight
  // gradients are summed and ZeRO-1 shards; Dp alone is the ranks reading
  // different sequences. Both are the same group with cp = 1.
  enum Group { World, Dp, Pp, Tp, Cp, DpCp, Embed, kGroups };
  // Makes a group's data communicator (collective over the group); the
  // default is MPI on host memory (the CPU backend's).
  using DataCommMaker = std::function<std::unique_ptr<DataComm>(Group, MPI_Comm, ControlComm&)>;

  // Collective over `world`; world size must equal shape.ranks() (checked by caller).
  // With a flight recorder, every group's calls are logged into it.
  ProcessGrid(MPI_Comm world, const GridShape& shape, FlightRecorder* recorder = nullptr,
              const DataCommMaker& make_data = {});
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoords& coords() const { return coords_; }
  ControlComm& control(Group g) { return *control_[g]; }
  DataComm& data(Group g) { return *data_[g]; }
  ControlComm& world() { return control(World); }
  // Embed: the first and last pipeline stage of this rank's (dp, tp) column:
  // where a tied embedding's two copies live. Size 1 without pipeline
  // parallelism (and on middle stages, which hold no copy).

 private:
  GridShape shape_;
  GridCoords coords_;
  MPI_Comm comms_[kGroups];  // MPI_COMM_NULL: the group is another's (DpCp without cp)
  std::unique_ptr<MpiControlComm> mpi_control_[kGroups];
  std::unique_ptr<DataComm> own_data_[kGroups];
  std::unique_ptr<RecordingControlComm> rec_control_[kGroups];
  std::unique_ptr<RecordingDataComm> rec_data_[kGroups];
  ControlComm* control_[kGroups];  // the recorded ones when there is a recorder
  DataComm* data_[kGroups];
};

}  // namespace trainer
