#pragma once
// Element types of backend buffers. bf16 is stored as its 16 bits (the top
// half of an fp32); arithmetic on it happens in fp32 (every backend widens,
// computes and rounds back), so one conversion pair defines its numerics.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace trainer {

enum class DType : uint8_t { F32, BF16, I32 };

struct bf16 {
  uint16_t bits = 0;
};

inline size_t dtype_size(DType d) { return d == DType::BF16 ? 2 : 4; }
inline const char* dtype_name(DType d) {
  return d == DType::F32 ? "fp32" : d == DType::BF16 ? "bf16" : "int32";
}

// Round to nearest, ties to even (as PyTorch and CUDA's __float2bfloat16);
// NaN stays a (quiet) NaN.
inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}
inline float from_bf16(bf16 b) {
  const uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace trainer
