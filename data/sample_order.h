#pragma once
// The global order of training samples: a stream of epochs, each a
// permutation of [0, N) that is a pure function of (seed, epoch). Position p
// in the stream is sample perm_{p / N}[p % N], so every sample is used exactly
// once per epoch no matter how the stream is split among ranks and steps.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainer {

class SampleOrder {
 public:
  SampleOrder(size_t num_samples, uint64_t seed, bool shuffle);
  size_t at(uint64_t position);  // caches the current epoch's permutation
  size_t num_samples() const { return n_; }

 private:
  size_t n_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = -1;
  std::vector<uint32_t> perm_;
};

// Permutation of [0, n) for one epoch (Fisher-Yates on our own generator).
std::vector<uint32_t> epoch_permutation(size_t n, uint64_t seed, uint64_t epoch);

}  // namespace trainer
