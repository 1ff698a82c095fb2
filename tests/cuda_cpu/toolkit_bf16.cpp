// The CUDA toolkit's own bf16 conversions, as the reference of the CPU
// tier's (cuda_emu.h). Compiled apart, against the real cuda_bf16.h (which
// g++ compiles for the host), so the two __nv_bfloat16 types never meet.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

uint16_t toolkit_float2bfloat16_rn(float f) {
  const __nv_bfloat16 b = __float2bfloat16_rn(f);
  uint16_t u;
  std::memcpy(&u, &b, 2);
  return u;
}

float toolkit_bfloat162float(uint16_t u) {
  __nv_bfloat16 b;
  std::memcpy(&b, &u, 2);
  return __bfloat162float(b);
}
