#include "parallel/process_grid.h"

namespace trainer {

GridCoords grid_coords(const GridShape& g, int r) {
  return {r / (g.tp * g.pp), (r / g.tp) % g.pp, r % g.tp};
}

ProcessGrid::ProcessGrid(MPI_Comm world, const GridShape& shape, FlightRecorder* recorder)
    : shape_(shape) {
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
  const MPI_Comm comms[5] = {world, dp_comm_, pp_comm_, tp_comm_, embed_comm_};
  const char* names[5] = {"world", "dp", "pp", "tp", "embed"};
  for (int g = 0; g < 5; g++) {
    mpi_[g] = std::make_unique<MpiCommunicator>(comms[g]);
    use_[g] = mpi_[g].get();
    if (!recorder) continue;
    std::vector<int> members(mpi_[g]->size());  // world rank of each group rank
    MPI_Allgather(&rank, 1, MPI_INT, members.data(), 1, MPI_INT, comms[g]);
    recorded_[g] = std::make_unique<RecordingCommunicator>(*mpi_[g], *recorder, names[g], members);
    use_[g] = recorded_[g].get();
  }
}

ProcessGrid::~ProcessGrid() {
  for (MPI_Comm* c : {&dp_comm_, &pp_comm_, &tp_comm_, &embed_comm_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

}  // namespace trainer
