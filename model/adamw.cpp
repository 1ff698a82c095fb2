#include "model/adamw.h"

#include <algorithm>
#include <cmath>

namespace trainer {

std::vector<OwnedRange> zero_ranges(size_t n, int dp_rank, int dp_size, size_t at, size_t local) {
  if (dp_size <= 1) return {{at, at + n, local}};
  const size_t block = n / (size_t)dp_size, body = block * (size_t)dp_size;
  std::vector<OwnedRange> out;
  if (block > 0) out.push_back({at + block * (size_t)dp_rank, at + block * (size_t)(dp_rank + 1), local});
  if (body < n) out.push_back({at + body, at + n, local + block, true, dp_rank + 1 == dp_size});
  return out;
}

size_t unit_slice(size_t unit_elems, int dp_size) {
  return (unit_elems + (size_t)dp_size - 1) / (size_t)dp_size;
}

std::vector<OwnedRange> unit_ranges(const ParamUnits& units, int dp_rank, int dp_size) {
  std::vector<OwnedRange> out;
  size_t local = 0;
  for (const ParamUnit& u : units.all) {
    const size_t s = unit_slice(u.size(), dp_size);
    const size_t lo = std::min(u.hi, u.lo + s * (size_t)dp_rank), hi = std::min(u.hi, lo + s);
    if (lo < hi) out.push_back({lo, hi, local}), local += hi - lo;
  }
  return out;
}

UnitSlices::UnitSlices(ParamUnits u, int dp_rank, int dp_size)
    : units(std::move(u)), owned(unit_ranges(units, dp_rank, dp_size)), owned_of(units.all.size(), -1) {
  for (size_t i = 0; i < owned.size(); i++) owned_of[units.of(owned[i].lo)] = (int)i;
}

size_t owned_count(const std::vector<OwnedRange>& ranges) {
  size_t n = 0;
  for (const OwnedRange& r : ranges) n += r.hi - r.lo;
  return n;
}

AdamW::AdamW(Backend& be, const ParamRegistry& reg, const AdamWConfig& cfg, std::vector<OwnedRange> owned)
    : be_(be), reg_(reg), cfg_(cfg),
      owned_(owned.empty() ? std::vector<OwnedRange>{{0, reg.total(), 0}} : std::move(owned)),
      m_(be.alloc(owned_count(owned_), DType::F32, Mem::Optimizer)),
      v_(be.alloc(owned_count(owned_), DType::F32, Mem::Optimizer)) {}

void AdamW::step(Buffer& params_buf, const Buffer& grads_buf, float lr, float grad_scale, Buffer* compute_copy,
                 Packed packed) {
  float* params = params_buf.ref().f32();
  const float* grads = grads_buf.ref().f32();
  float* m = m_.ref().f32();
  float* v = v_.ref().f32();
  t_++;
  const float bc1 = 1.f - std::pow(cfg_.beta1, (float)t_);
  const float bc2 = 1.f - std::pow(cfg_.beta2, (float)t_);
  // Each tensor's part in each owned range (weight decay is per tensor).
  for (const ParamInfo& p : reg_.all())
    for (const OwnedRange& r : owned_) {
      const size_t lo = std::max(p.offset, r.lo), hi = std::min(p.offset + p.numel, r.hi);
      if (lo >= hi) continue;
      const size_t local = r.local + (lo - r.lo);
      be_.adamw(params + (packed == Packed::Both ? local : lo), grads + (packed != Packed::None ? local : lo), m + local, v + local, hi - lo, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                p.decay ? cfg_.weight_decay : 0.f, bc1, bc2, grad_scale,
                compute_copy ? compute_copy->ref(lo) : Ref());
    }
}

float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.f;
  const double coef = max_norm / (norm + 1e-6);
  return coef < 1.0 ? (float)coef : 1.f;
}

}  // namespace trainer
