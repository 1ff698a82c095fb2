#include "parallel/process_grid.h"

namespace trainer {

GridCoords grid_coords(const GridShape& g, int r) {
  return {r / (g.tp * g.pp), (r / g.tp) % g.pp, r % g.tp};
}

ProcessGrid::ProcessGrid(MPI_Comm world, const GridShape& shape) : shape_(shape) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  coords_ = grid_coords(shape, rank);
  const GridCoords& c = coords_;
  // Peers of a group share every coordinate but the group's own.
  MPI_Comm_split(world, c.pp * shape.tp + c.tp, c.dp, &dp_comm_);
  MPI_Comm_split(world, c.dp * shape.tp + c.tp, c.pp, &pp_comm_);
  MPI_Comm_split(world, c.dp * shape.pp + c.pp, c.tp, &tp_comm_);
  const bool end_stage = c.pp == 0 || c.pp == shape.pp - 1;
  const int column = c.dp * shape.tp + c.tp;
  MPI_Comm_split(world, end_stage ? column : shape.dp * shape.tp + rank, c.pp, &embed_comm_);
  world_ = std::make_unique<MpiCommunicator>(world);
  dp_ = std::make_unique<MpiCommunicator>(dp_comm_);
  pp_ = std::make_unique<MpiCommunicator>(pp_comm_);
  tp_ = std::make_unique<MpiCommunicator>(tp_comm_);
  embed_ = std::make_unique<MpiCommunicator>(embed_comm_);
}

ProcessGrid::~ProcessGrid() {
  for (MPI_Comm* c : {&dp_comm_, &pp_comm_, &tp_comm_, &embed_comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

}  // namespace trainer
