#include "parallel/process_grid.h"

#include <string>
#include <vector>

namespace trainer {

namespace {

// Each group: its name and the dimensions its peers differ in (they share
// every other coordinate). A group that adds only dimensions of size 1 to
// the one it stands for (`same_as`) is that group: no second communicator.
struct GroupSpec {
  std::string name;  // the flight recorder's
  GridDims dims;
  int same_as = -1;
};
using G = ProcessGrid;
const std::vector<GroupSpec> kGroupSpecs = [] {
  std::vector<GroupSpec> s(G::kGroups);
  s[G::World] = {"world", kAllGridDims};
  for (const GridDim& d : kGridDims) s[G::of(d.name)] = {d.name, grid_dim(d.name)};
  s[G::Replicas] = {grid_names(kWeightReplicaDims, "_"), kWeightReplicaDims, G::of("dp")};
  s[G::Embed] = {"embed", grid_dim("pp")};  // and only the end stages: see below
  s[G::Experts] = {"ep", kWeightReplicaDims};  // parts of the replicas: see below
  s[G::ExpertReplicas] = {"edp", kWeightReplicaDims};
  return s;
}();

// A rank's coordinates in `dims` as one mixed-radix number (the fastest
// dimension first, as world ranks are numbered).
int index_in(const GridShape& g, const GridCoords& c, GridDims dims) {
  int index = 0, radix = 1;
  for (int i = 0; i < kGridDimCount; i++)
    if (dims >> i & 1) index += c.*kGridDims[i].coord * radix, radix *= g.*kGridDims[i].size;
  return index;
}

}  // namespace

ProcessGrid::ProcessGrid(MPI_Comm world, const GridShape& shape, FlightRecorder* recorder,
                         const DataCommMaker& make_data)
    : shape_(shape) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  coords_ = grid_coords(shape, rank);
  const GridCoords& c = coords_;
  // Peers of a group share every coordinate but the group's own: the others
  // are the colour, the group's own the order within it.
  comms_[World] = world;
  const int replica = index_in(shape, c, kWeightReplicaDims), ep = shape.ep;
  for (int g = World + 1; g < kGroups; g++) {
    const GroupSpec& spec = kGroupSpecs[g];
    comms_[g] = MPI_COMM_NULL;
    if (spec.same_as >= 0 && shape.size_of(spec.dims & ~kGroupSpecs[spec.same_as].dims) == 1) continue;
    if ((g == Experts || g == ExpertReplicas) && ep == 1) continue;
    int colour = index_in(shape, c, kAllGridDims & ~spec.dims), key = index_in(shape, c, spec.dims);
    // Embed: the first and last pipeline stage of a column hold the tied
    // embedding's two copies; a middle stage is a group of its own.
    if (g == Embed && c.pp != 0 && c.pp != shape.pp - 1) colour = (int)(shape.ranks() / shape.pp) + rank;
    // The replicas cut into ep parts (replica rho holds part rho % ep):
    // Experts is the ep replicas rho / ep has alike, one of each part
    // (ordered by part), ExpertReplicas the replicas holding one part.
    if (g == Experts) colour = colour * (int)shape.expert_replicas() + replica / ep, key = replica % ep;
    if (g == ExpertReplicas) colour = colour * ep + replica % ep, key = replica / ep;
    MPI_Comm_split(world, colour, key, &comms_[g]);
  }
  for (int g = 0; g < kGroups; g++) {
    if (comms_[g] == MPI_COMM_NULL) {
      const int as = g == ExpertReplicas ? Replicas : kGroupSpecs[g].same_as;
      control_[g] = as >= 0 ? control_[as] : nullptr, data_[g] = as >= 0 ? data_[as] : nullptr;
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
    const int id = recorder->add_group(kGroupSpecs[g].name, members);
    rec_control_[g] = std::make_unique<RecordingControlComm>(*mpi_control_[g], *recorder, id, members);
    rec_data_[g] = std::make_unique<RecordingDataComm>(*own_data_[g], *recorder, id, members);
    control_[g] = rec_control_[g].get();
    data_[g] = rec_data_[g].get();
  }
}

ProcessGrid::~ProcessGrid() {
  for (int g = 0; g < kGroups; g++) own_data_[g].reset();  // their duplicates first
  for (int g = World + 1; g < kGroups; g++)
    if (comms_[g] != MPI_COMM_NULL) MPI_Comm_free(&comms_[g]);
}

}  // namespace trainer
