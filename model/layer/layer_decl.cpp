#include "model/layer/layer_decl.h"

namespace trainer {

SavedActs layer_saved(const LayerShape& s) {
  const Kept product = Kept::UnlessFull;
  return {
      {s.R * s.d, false, Kept::Always},  // kResidIn
      {s.M * s.d, false, product},       // kNorm1
      {s.R, true, product},              // kMean1
      {s.R, true, product},              // kRstd1
      {s.R * s.d, false, product},       // kResidMid
      {s.M * s.d, false, product},       // kNorm2
      {s.R, true, product},              // kMean2
      {s.R, true, product},              // kRstd2
  };
}

std::vector<size_t> layer_scratch(const LayerShape& s) { return {s.R * s.d, s.M * s.d}; }

}  // namespace trainer
