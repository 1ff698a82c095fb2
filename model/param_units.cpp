#include "model/param_units.h"

#include <algorithm>
#include <stdexcept>

namespace trainer {

ParamUnits param_units(const ModelParams& mp) {
  ParamUnits u;
  const size_t total = mp.reg.total();
  const size_t layers_end = mp.chunk.head ? mp.normf.w : total;
  const size_t layers_lo = mp.layers.empty() ? layers_end : mp.layers.front().norm1.w;
  if (mp.chunk.embed) u.embed = 0, u.all.push_back({0, layers_lo});
  u.first_layer = (int)u.all.size();
  for (size_t l = 0; l < mp.layers.size(); l++)
    u.all.push_back({mp.layers[l].norm1.w, l + 1 < mp.layers.size() ? mp.layers[l + 1].norm1.w : layers_end});
  if (mp.chunk.head) u.head = (int)u.all.size(), u.all.push_back({layers_end, total});
  return u;
}

int ParamUnits::of(size_t offset) const {
  for (size_t i = 0; i < all.size(); i++)
    if (offset >= all[i].lo && offset < all[i].hi) return (int)i;
  throw std::out_of_range("registry offset " + std::to_string(offset) + " is in no unit");
}

size_t ParamUnits::largest_layer() const {
  size_t n = 0;
  for (int i = first_layer; i < first_layer + (int)all.size() - (embed >= 0) - (head >= 0); i++)
    n = std::max(n, all[i].size());
  return n;
}

}  // namespace trainer
