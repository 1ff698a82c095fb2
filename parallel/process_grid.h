#pragma once
// The process grid: every group's communicators over a grid shape
// (parallel/grid_shape.h), the plain ones and the derived weight replicas, each
// group kind its own sub-communicator.
#include <mpi.h>

#include <functional>
#include <memory>

#include "parallel/grid_shape.h"
#include "parallel/mpi_communicator.h"
#include "parallel/recording_communicator.h"

namespace trainer {

// Each group has a control communicator (host values) and a data
// communicator (backend buffers) over the same ranks.
class ProcessGrid {
 public:
  // The groups: the world; one per grid dimension (of("tp"): its peers
  // differ in that coordinate only), in kGridDims order; Replicas, the ranks
  // that hold the same weights (kWeightReplicaDims: where weight gradients
  // are summed and ZeRO-1 shards; of("dp") alone is the ranks reading
  // different sequences, and the same group where the other replica
  // dimensions are 1); Embed (below); Experts and ExpertReplicas (expert
  // parallelism, GridShape::ep: the replicas holding one layer's experts
  // between them, and those holding the same experts; Experts exists only
  // where ep > 1, ExpertReplicas is Replicas where ep = 1). Each group's
  // dimensions are in kGroupSpecs (process_grid.cpp).
  using Group = int;
  static constexpr Group World = 0;
  static constexpr Group of(const char* dim) { return 1 + known_grid_dim(dim); }
  static constexpr Group Replicas = 1 + kGridDimCount, Embed = Replicas + 1, Experts = Embed + 1,
                         ExpertReplicas = Experts + 1, kGroups = ExpertReplicas + 1;
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
  bool has(Group g) const { return data_[g] != nullptr; }
  ControlComm& world() { return control(World); }
  // Embed: the first and last pipeline stage of this rank's column (its
  // other coordinates): where a tied embedding's two copies live. Size 1
  // without pipeline parallelism (and on middle stages, which hold no copy).

 private:
  GridShape shape_;
  GridCoords coords_;
  MPI_Comm comms_[kGroups];  // MPI_COMM_NULL: the group is another's (GroupSpec::same_as)
  std::unique_ptr<MpiControlComm> mpi_control_[kGroups];
  std::unique_ptr<DataComm> own_data_[kGroups];
  std::unique_ptr<RecordingControlComm> rec_control_[kGroups];
  std::unique_ptr<RecordingDataComm> rec_data_[kGroups];
  ControlComm* control_[kGroups];  // the recorded ones when there is a recorder
  DataComm* data_[kGroups];
};

}  // namespace trainer
