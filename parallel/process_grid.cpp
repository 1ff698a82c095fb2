#include "parallel/process_grid.h"

namespace trainer {

GridCoords grid_coords(const GridShape& g, int r) {
  return {r / (g.tp * g.cp * g.pp), (r / (g.tp * g.cp)) % g.pp, r % g.tp, (r / g.tp) % g.cp};
}

ProcessGrid::ProcessGrid(MPI_Comm world, const GridShape& shape, FlightRecorder* recorder,
                         const DataCommMaker& make_data)
    : shape_(shape) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  coords_ = grid_coords(shape, rank);
  const GridCoords& c = coords_;
  const int tp = shape.tp, cp = shape.cp;
  // Peers of a group share every coordinate but the group's own.
  comms_[World] = world;
  MPI_Comm_split(world, (c.pp * cp + c.cp) * tp + c.tp, c.dp, &comms_[Dp]);
  MPI_Comm_split(world, (c.dp * cp + c.cp) * tp + c.tp, c.pp, &comms_[Pp]);
  MPI_Comm_split(world, (c.dp * shape.pp + c.pp) * cp + c.cp, c.tp, &comms_[Tp]);
  MPI_Comm_split(world, (c.dp * shape.pp + c.pp) * tp + c.tp, c.cp, &comms_[Cp]);
  // Without context parallelism dp x cp is the dp group: no second communicator.
  comms_[DpCp] = MPI_COMM_NULL;
  if (cp > 1) MPI_Comm_split(world, c.pp * tp + c.tp, c.dp * cp + c.cp, &comms_[DpCp]);
  const bool end_stage = c.pp == 0 || c.pp == shape.pp - 1;
  const int column = (c.dp * cp + c.cp) * tp + c.tp;
  MPI_Comm_split(world, end_stage ? column : shape.dp * cp * tp + rank, c.pp, &comms_[Embed]);
  const char* names[kGroups] = {"world", "dp", "pp", "tp", "cp", "dp_cp", "embed"};
  for (int g = 0; g < kGroups; g++) {
    if (comms_[g] == MPI_COMM_NULL) {
      control_[g] = control_[Dp], data_[g] = data_[Dp];
      continue;
    }
    mpi_control_[g] = std::make_unique<MpiControlComm>(comms_[g]);
    own_data_[g] = make_data ? make_data(Group(g), comms_[g], *mpi_control_[g])
                             : std::make_unique<MpiDataComm>(comms_[g]);
    control_[g] = mpi_control_[g].get();
    data_[g] = own_data_[g].get();
    if (!recorder) continue;
    std::vector<int> members(mpi_control_[g]->size());  // world rank of each group rank
    MPI_Allgather(&rank, 1, MPI_INT, members.data(), 1, MPI_INT, comms_[g]);
    // One recorder group for both kinds: their calls share the group's
    // sequence, which every member makes in the same order.
    const int id = recorder->add_group(names[g], members);
    rec_control_[g] = std::make_unique<RecordingControlComm>(*mpi_control_[g], *recorder, id, members);
    rec_data_[g] = std::make_unique<RecordingDataComm>(*own_data_[g], *recorder, id, members);
    control_[g] = rec_control_[g].get();
    data_[g] = rec_data_[g].get();
  }
}

ProcessGrid::~ProcessGrid() {
  for (int g = 0; g < kGroups; g++) own_data_[g].reset();  // their duplicates first
  for (int g = Dp; g < kGroups; g++)
    if (comms_[g] != MPI_COMM_NULL) MPI_Comm_free(&comms_[g]);
}

}  // namespace trainer
