#include "model/param_units.h"

#include <algorithm>
#include <stdexcept>

namespace trainer {

ParamUnits param_units(const ModelParams& mp, size_t persist_below) {
  ParamUnits u;
  u.tied = mp.tied;
  const size_t total = mp.reg.total();
  const size_t layers_end = mp.chunk.head ? mp.normf.w : total;
  const size_t layers_lo = mp.layers.empty() ? layers_end : mp.layers.front().norm1.w;
  if (mp.chunk.embed) u.embed = 0, u.all.push_back({0, layers_lo});
  u.first_layer = (int)u.all.size();
  const std::vector<ParamInfo>& tensors = mp.reg.all();  // in offset order
  size_t t = 0;
  for (size_t l = 0; l < mp.layers.size(); l++) {
    const size_t lo = mp.layers[l].norm1.w, hi = l + 1 < mp.layers.size() ? mp.layers[l + 1].norm1.w : layers_end;
    // The layer's vectors come first (build_params), its matrices from wq on.
    const size_t matrices = mp.layers[l].wqkv;
    bool persist = persist_below > 0 && lo < matrices;
    for (; persist_below > 0 && t < tensors.size() && tensors[t].offset < matrices; t++)
      if (tensors[t].offset >= lo) {
        size_t n = 1;
        for (int d : tensors[t].global_shape) n *= (size_t)d;
        persist = persist && n < persist_below;
      }
    if (persist) u.all.push_back({lo, matrices, true});
    u.layers.push_back((int)u.all.size());
    u.all.push_back({persist ? matrices : lo, hi});
  }
  if (mp.chunk.head) u.head = (int)u.all.size(), u.all.push_back({layers_end, total});
  return u;
}

int ParamUnits::of(size_t offset) const {
  // In registry order: the first unit whose end is past the offset.
  const auto it = std::upper_bound(all.begin(), all.end(), offset, [](size_t o, const ParamUnit& u) { return o < u.hi; });
  if (it == all.end() || offset < it->lo)
    throw std::out_of_range("registry offset " + std::to_string(offset) + " is in no unit");
  return (int)(it - all.begin());
}

}  // namespace trainer
