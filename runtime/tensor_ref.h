#pragma once
// Typed pointers into backend memory: what kernels and the data communicator
// take. A Ref knows its element type, so one kernel signature serves fp32 and
// bf16 activations and the backend decides how to compute on them; a plain
// float*, bf16* or int32_t* converts implicitly. Host code never reads
// through one: it copies with Backend::to_host / from_host.
#include <cassert>
#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"

namespace trainer {

struct Ref {
  void* p = nullptr;
  DType dt = DType::F32;
  Ref() = default;
  Ref(std::nullptr_t) {}
  Ref(void* ptr, DType d) : p(ptr), dt(d) {}
  Ref(float* f) : p(f), dt(DType::F32) {}
  Ref(bf16* b) : p(b), dt(DType::BF16) {}
  Ref(int32_t* i) : p(i), dt(DType::I32) {}
  explicit operator bool() const { return p != nullptr; }
  // n elements further on.
  Ref operator+(size_t n) const { return {p ? static_cast<char*>(p) + n * dtype_size(dt) : nullptr, dt}; }
  float* f32() const { return assert(dt == DType::F32 || !p), static_cast<float*>(p); }
  bf16* b16() const { return assert(dt == DType::BF16 || !p), static_cast<bf16*>(p); }
  int32_t* i32() const { return assert(dt == DType::I32 || !p), static_cast<int32_t*>(p); }
};

struct CRef {
  const void* p = nullptr;
  DType dt = DType::F32;
  CRef() = default;
  CRef(std::nullptr_t) {}
  CRef(const void* ptr, DType d) : p(ptr), dt(d) {}
  CRef(const float* f) : p(f), dt(DType::F32) {}
  CRef(const bf16* b) : p(b), dt(DType::BF16) {}
  CRef(const int32_t* i) : p(i), dt(DType::I32) {}
  CRef(Ref r) : p(r.p), dt(r.dt) {}
  explicit operator bool() const { return p != nullptr; }
  CRef operator+(size_t n) const {
    return {p ? static_cast<const char*>(p) + n * dtype_size(dt) : nullptr, dt};
  }
  const float* f32() const { return assert(dt == DType::F32 || !p), static_cast<const float*>(p); }
  const bf16* b16() const { return assert(dt == DType::BF16 || !p), static_cast<const bf16*>(p); }
  const int32_t* i32() const { return assert(dt == DType::I32 || !p), static_cast<const int32_t*>(p); }
};

}  // namespace trainer
