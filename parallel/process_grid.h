#pragma once
// The process grid: world = dp * pp * tp, ranks ordered with tp fastest, then
// pp, then dp, so tensor-parallel peers are neighbours (one node). Each group
// kind gets its own sub-communicator. Only dp > 1 is used by training so far;
// tp and pp groups exist so later layers can use them.
#include <mpi.h>

#include <memory>

#include "parallel/mpi_communicator.h"

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
  ProcessGrid(MPI_Comm world, const GridShape& shape);
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoords& coords() const { return coords_; }
  Communicator& world() { return *world_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  Communicator& tp() { return *tp_; }
  // The first and last pipeline stage of this rank's (dp, tp) column: where a
  // tied embedding's two copies live. Size 1 without pipeline parallelism
  // (and on middle stages, which hold no copy).
  Communicator& embed() { return *embed_; }

 private:
  GridShape shape_;
  GridCoords coords_;
  MPI_Comm dp_comm_ = MPI_COMM_NULL, pp_comm_ = MPI_COMM_NULL, tp_comm_ = MPI_COMM_NULL;
  MPI_Comm embed_comm_ = MPI_COMM_NULL;
  std::unique_ptr<MpiCommunicator> world_, dp_, pp_, tp_, embed_;
};

}  // namespace trainer
