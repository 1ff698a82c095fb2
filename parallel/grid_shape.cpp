#include "parallel/grid_shape.h"

namespace trainer {

GridCoords grid_coords(const GridShape& g, int r) {
  GridCoords c{};
  for (const GridDim& d : kGridDims) c.*d.coord = r % (g.*d.size), r /= g.*d.size;
  return c;
}

std::string grid_position(const GridShape& g, int r) {
  const GridCoords c = grid_coords(g, r);
  std::string out;
  for (int i = kGridDimCount - 1; i >= 0; i--)
    out += std::string(out.empty() ? "" : ", ") + kGridDims[i].name + " " + std::to_string(c.*kGridDims[i].coord);
  return out;
}

}  // namespace trainer
