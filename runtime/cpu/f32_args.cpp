#include "runtime/cpu/f32_args.h"

#include <algorithm>
#include <stdexcept>

namespace trainer {

namespace {
constexpr size_t kChunk = 1 << 16;
}

void widen_to(float* dst, const bf16* src, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < (n + kChunk - 1) / kChunk; k++)
    for (size_t i = k * kChunk; i < std::min(n, (k + 1) * kChunk); i++) dst[i] = from_bf16(src[i]);
}

void narrow_to(bf16* dst, const float* src, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < (n + kChunk - 1) / kChunk; k++)
    for (size_t i = k * kChunk; i < std::min(n, (k + 1) * kChunk); i++) dst[i] = to_bf16(src[i]);
}

float* F32Args::scratch(size_t n) {
  scratch_.push_back(std::make_unique_for_overwrite<float[]>(std::max<size_t>(n, 1)));
  return scratch_.back().get();
}

const float* F32Args::in(CRef r, size_t n) {
  if (!r.p || r.dt == DType::F32) return static_cast<const float*>(r.p);
  if (r.dt != DType::BF16) throw std::logic_error("kernel argument is neither fp32 nor bf16");
  float* f = scratch(n);
  widen_to(f, r.b16(), n);
  return f;
}

float* F32Args::out(Ref r, size_t n) {
  if (!r.p || r.dt == DType::F32) return static_cast<float*>(r.p);
  if (r.dt != DType::BF16) throw std::logic_error("kernel argument is neither fp32 nor bf16");
  float* f = scratch(n);
  back_.push_back({r.b16(), f, n});
  return f;
}

float* F32Args::inout(Ref r, size_t n) {
  float* f = out(r, n);
  if (r.p && r.dt == DType::BF16) widen_to(f, r.b16(), n);
  return f;
}

F32Args::~F32Args() {
  for (const Pending& p : back_) narrow_to(p.dst, p.src, p.n);
}

}  // namespace trainer
