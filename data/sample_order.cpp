#include "data/sample_order.h"

#include <numeric>

#include "runtime/rng.h"

namespace trainer {

std::vector<uint32_t> epoch_permutation(size_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0u);
  Rng rng(seed, hash_string("data.order") + epoch);
  for (size_t i = n; i > 1; i--) std::swap(p[i - 1], p[rng.below(i)]);
  return p;
}

SampleOrder::SampleOrder(size_t num_samples, uint64_t seed, bool shuffle)
    : n_(num_samples), seed_(seed), shuffle_(shuffle) {}

size_t SampleOrder::at(uint64_t position) {
  const uint64_t idx = position % n_;
  if (!shuffle_) return idx;
  const int64_t e = (int64_t)(position / n_);
  if (e != epoch_) {
    perm_ = epoch_permutation(n_, seed_, (uint64_t)e);
    epoch_ = e;
  }
  return perm_[idx];
}

}  // namespace trainer
