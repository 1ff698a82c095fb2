#include "runtime/library_versions.h"

#include <hdf5.h>
#include <mpi.h>

namespace trainer {

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);  // allowed before MPI_Init
  const std::string s = text;
  return s.substr(0, s.find_first_of(",\n"));
}

std::string hdf5_library_version() {
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  return "HDF5 " + std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel);
}

}  // namespace trainer
