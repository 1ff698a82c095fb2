#pragma once
// Versions of the libraries a run links, as one short string each: shown by
// `trainer --version` and recorded in each launch's record.
#include <string>

namespace trainer {

std::string mpi_library_version();   // "Open MPI v4.1.4"
std::string hdf5_library_version();  // "HDF5 1.10.8"

}  // namespace trainer
