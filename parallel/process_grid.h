#pragma once
// The process grid: world = dp * pp * cp * tp, ranks ordered with tp fastest,
// then cp, then pp, then dp, so tensor-parallel peers are neighbours and
// context-parallel ones next to them (one node, as Megatron orders them).
// The dimensions are declared once, in that order (kGridDims): the rank
// count, a rank's coordinates and every group's communicator (the plain ones
// and the derived dp x cp) walk that list. Each group kind gets its own
// sub-communicator.
#include <mpi.h>

#include <climits>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

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
  long ranks() const;
  long model_ranks() const;      // one model copy: tp x cp x pp (kModelDims)
  long weight_replicas() const;  // the ranks that hold the same weights: dp x cp (kWeightReplicaDims)
  long size_of(unsigned dims) const;  // the ranks a set of dimensions (GridDims) spans
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

// One dimension of the grid: its name (the recipe's parallel.NAME, the
// group's name in flight recordings), its size and a rank's coordinate.
struct GridDim {
  const char* name;
  int GridShape::*size;
  int GridCoords::*coord;
};
// The dimensions, the fastest-varying first: world rank = the mixed-radix
// number of a rank's coordinates in this order.
inline constexpr GridDim kGridDims[] = {
    {"tp", &GridShape::tp, &GridCoords::tp},
    {"cp", &GridShape::cp, &GridCoords::cp},
    {"pp", &GridShape::pp, &GridCoords::pp},
    {"dp", &GridShape::dp, &GridCoords::dp},
};
inline constexpr int kGridDimCount = sizeof kGridDims / sizeof kGridDims[0];
// A set of dimensions, bit i for kGridDims[i].
using GridDims = unsigned;
constexpr GridDims grid_dim(const char* name) {
  for (int i = 0; i < kGridDimCount; i++) {
    const char* a = kGridDims[i].name;
    const char* b = name;
    while (*a && *a == *b) a++, b++;
    if (*a == *b) return 1u << i;
  }
  return 0;
}
inline constexpr GridDims kAllGridDims = (1u << kGridDimCount) - 1;
// The derived groups: one model copy (every dimension but dp), and the
// ranks that hold the same weights (where weight gradients are summed and
// ZeRO shards): dp and cp, whose ranks read different tokens of one model.
inline constexpr GridDims kModelDims = kAllGridDims & ~grid_dim("dp");
inline constexpr GridDims kWeightReplicaDims = grid_dim("dp") | grid_dim("cp");

inline long GridShape::size_of(unsigned dims) const {
  long p = 1;
  for (int i = 0; i < kGridDimCount; i++)
    if (dims >> i & 1) p = saturated_product({p, this->*kGridDims[i].size});
  return p;
}
inline long GridShape::ranks() const { return size_of(kAllGridDims); }
inline long GridShape::model_ranks() const { return size_of(kModelDims); }
inline long GridShape::weight_replicas() const { return size_of(kWeightReplicaDims); }

// Pure arithmetic, testable without MPI.
GridCoords grid_coords(const GridShape& g, int world_rank);
// Where a rank sits, for messages: "dp 1, pp 0, cp 0, tp 1" (the slowest
// dimension first, as users read a layout).
std::string grid_position(const GridShape& g, int world_rank);

// Each group has a control communicator (host values) and a data
// communicator (backend buffers) over the same ranks.
class ProcessGrid {
 public:
  // DpCp: the ranks that hold the same weights (dp x cp): where weight
  // gradients are summed and ZeRO-1 shards; Dp alone is the ranks reading
  // different sequences. Both are the same group with cp = 1. Each group's
  // dimensions are in kGroupSpecs (process_grid.cpp).
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
