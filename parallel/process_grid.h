#pragma once
// The process grid: world = dp * pp * tp, ranks ordered with tp fastest, then
// pp, then dp, so tensor-parallel peers are neighbours (one node). Each group
// kind gets its own sub-communicator.
#include <mpi.h>

#include <memory>

#include "parallel/mpi_communicator.h"
#include "parallel/recording_communicator.h"

namespace trainer {

struct GridShape {
  int dp = 1, pp = 1, tp = 1;
};

struct GridCoords {
  int dp, pp, tp;
};

// Pure arithmetic, testable without MPI.
GridCoords grid_coords(const GridShape& g, int world_rank);

class ProcessGrid {
 public:
  // Collective over `world`; world size must equal dp*pp*tp (checked by caller).
  // With a flight recorder, every group's calls are logged into it.
  ProcessGrid(MPI_Comm world, const GridShape& shape, FlightRecorder* recorder = nullptr);
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoords& coords() const { return coords_; }
  Communicator& world() { return *use_[0]; }
  Communicator& dp() { return *use_[1]; }
  Communicator& pp() { return *use_[2]; }
  Communicator& tp() { return *use_[3]; }
  // The first and last pipeline stage of this rank's (dp, tp) column: where a
  // tied embedding's two copies live. Size 1 without pipeline parallelism
  // (and on middle stages, which hold no copy).
  Communicator& embed() { return *use_[4]; }

 private:
  GridShape shape_;
  GridCoords coords_;
  MPI_Comm dp_comm_ = MPI_COMM_NULL, pp_comm_ = MPI_COMM_NULL, tp_comm_ = MPI_COMM_NULL;
  MPI_Comm embed_comm_ = MPI_COMM_NULL;
  std::unique_ptr<MpiCommunicator> mpi_[5];  // world, dp, pp, tp, embed
  std::unique_ptr<RecordingCommunicator> recorded_[5];
  Communicator* use_[5];  // the recorded ones when there is a recorder
};

}  // namespace trainer
