#pragma once
// Several datasets mixed by weight into one sample stream. Weights are
// shares of samples, as Megatron-LM defines them: stream position p goes to
// the source whose count lags its share the most (w_j * max(p, 1) - count_j
// largest, the first on ties), so every source's share stays within one
// sample of its weight at every step. Each source walks its own epochs
// (its own permutation per epoch), so one that runs out starts its next
// epoch without disturbing the others.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace trainer {

struct BlendSource {
  std::string name;  // "" for a plain (unblended) set of files
  double weight = 1;
  const TokenDataset* data = nullptr;
};

class Blend {
 public:
  Blend() = default;
  explicit Blend(std::vector<BlendSource> sources) : sources_(std::move(sources)) {}
  static Blend single(const TokenDataset& ds) { return Blend({{"", 1, &ds}}); }
  const std::vector<BlendSource>& sources() const { return sources_; }
  bool blended() const { return sources_.size() > 1; }
  size_t num_samples() const;
  int seq_len() const { return sources_.front().data->seq_len(); }
  std::vector<double> shares() const;  // weights normalised to sum 1

 private:
  std::vector<BlendSource> sources_;
};

// Position -> source, by the rule above. Walks forward from where it was
// asked last (a rank reads its positions in increasing order); an earlier
// position restarts the walk from 0, so the answer is a pure function of
// the position.
class BlendOrder {
 public:
  explicit BlendOrder(std::vector<double> shares);
  // The source of position p; *nth: samples of that source before p.
  size_t source_at(uint64_t p, uint64_t* nth);
  // Samples of each source in positions [0, p).
  std::vector<uint64_t> counts_before(uint64_t p);

 private:
  size_t pick(uint64_t p) const;
  void walk_to(uint64_t p);
  std::vector<double> shares_;
  std::vector<uint64_t> counts_;  // of positions [0, pos_)
  uint64_t pos_ = 0;
};

}  // namespace trainer
