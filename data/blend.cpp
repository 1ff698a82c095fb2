#include "data/blend.h"

#include <numeric>

namespace trainer {

size_t Blend::num_samples() const {
  size_t n = 0;
  for (const auto& s : sources_) n += s.data->num_samples();
  return n;
}

std::vector<double> Blend::shares() const {
  double total = 0;
  for (const auto& s : sources_) total += s.weight;
  std::vector<double> out;
  for (const auto& s : sources_) out.push_back(s.weight / total);
  return out;
}

BlendOrder::BlendOrder(std::vector<double> shares) : shares_(std::move(shares)), counts_(shares_.size(), 0) {}

size_t BlendOrder::pick(uint64_t p) const {
  const double at = p > 1 ? (double)p : 1.0;  // Megatron's max(sample_idx, 1)
  size_t best = 0;
  double best_err = shares_[0] * at - (double)counts_[0];
  for (size_t j = 1; j < shares_.size(); j++)
    if (const double e = shares_[j] * at - (double)counts_[j]; e > best_err) best = j, best_err = e;
  return best;
}

void BlendOrder::walk_to(uint64_t p) {
  if (p < pos_) {
    std::fill(counts_.begin(), counts_.end(), 0);
    pos_ = 0;
  }
  for (; pos_ < p; pos_++) counts_[pick(pos_)]++;
}

size_t BlendOrder::source_at(uint64_t p, uint64_t* nth) {
  walk_to(p);
  const size_t j = pick(p);
  *nth = counts_[j];
  return j;
}

std::vector<uint64_t> BlendOrder::counts_before(uint64_t p) {
  walk_to(p);
  return counts_;
}

}  // namespace trainer
