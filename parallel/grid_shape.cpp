#include "parallel/grid_shape.h"

namespace trainer {

GridCoords grid_coords(const GridShape& g, int r) {
  GridCoords c{};
  for (const GridDim& d : kGridDims) c.*d.coord = r % (g.*d.size), r /= g.*d.size;
  return c;
}

namespace {
// The dimensions of `dims`, the slowest first, each as what(dimension), joined by sep.
template <class What>
std::string slowest_first(GridDims dims, const char* sep, What what) {
  std::string out;
  each_grid_dim_slowest_first([&](const GridDim& d, GridDims bit) {
    if (!(dims & bit)) return;
    if (!out.empty()) out += sep;
    out += what(d);
  });
  return out;
}
}  // namespace

std::string grid_sizes(const GridShape& g, GridDims dims, const char* sep) {
  return slowest_first(dims, sep, [&](const GridDim& d) { return std::string(d.name) + " " + std::to_string(g.*d.size); });
}
std::string grid_names(GridDims dims, const char* sep) {
  return slowest_first(dims, sep, [](const GridDim& d) { return std::string(d.name); });
}
std::string grid_values(const GridShape& g, GridDims dims, const char* sep) {
  return slowest_first(dims, sep, [&](const GridDim& d) { return std::to_string(g.*d.size); });
}

std::string grid_position(const GridShape& g, int r) {
  const GridCoords c = grid_coords(g, r);
  return slowest_first(kAllGridDims, ", ",
                       [&](const GridDim& d) { return std::string(d.name) + " " + std::to_string(c.*d.coord); });
}

}  // namespace trainer
