// Picks the widest kernel set this CPU runs, once, at first use.
#include "runtime/cpu/cpu_kernels.h"

namespace trainer::cpu {

#define TRAINER_KERNEL_DECLS                                                                  \
  void gelu_fwd(float*, const float*, size_t);                                                \
  void gelu_bwd(float*, const float*, const float*, size_t);                                  \
  void swiglu_fwd(float*, const float*, const float*, size_t);                                \
  void swiglu_bwd(float*, float*, const float*, const float*, const float*, size_t);          \
  float exp_shift_inplace(float*, size_t, float);                                             \
  float exp_shift_sum(const float*, size_t, float);                                           \
  float max_of(const float*, size_t);                                                         \
  void softmax_bwd_row(const float*, float*, size_t);                                         \
  double sumsq(const float*, size_t);                                                         \
  void scale_inplace(float*, float, size_t);                                                  \
  void adamw(float*, const float*, float*, float*, size_t, float, float, float, float, float, \
             float, float, float);
namespace avx512 { TRAINER_KERNEL_DECLS }
namespace avx2 { TRAINER_KERNEL_DECLS }
namespace generic { TRAINER_KERNEL_DECLS }
#undef TRAINER_KERNEL_DECLS

namespace {
enum class Isa { Avx512, Avx2, Generic };
Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
  return Isa::Generic;
}
const Isa kIsa = detect();
}  // namespace

#define TRAINER_DISPATCH(fn, ...)                      \
  switch (kIsa) {                                      \
    case Isa::Avx512: return avx512::fn(__VA_ARGS__);  \
    case Isa::Avx2: return avx2::fn(__VA_ARGS__);      \
    default: return generic::fn(__VA_ARGS__);          \
  }

void gelu_fwd(float* out, const float* x, size_t n) { TRAINER_DISPATCH(gelu_fwd, out, x, n) }
void gelu_bwd(float* dx, const float* x, const float* dout, size_t n) {
  TRAINER_DISPATCH(gelu_bwd, dx, x, dout, n)
}
void swiglu_fwd(float* out, const float* gate, const float* up, size_t n) {
  TRAINER_DISPATCH(swiglu_fwd, out, gate, up, n)
}
void swiglu_bwd(float* dgate, float* dup, const float* gate, const float* up, const float* dout,
                size_t n) {
  TRAINER_DISPATCH(swiglu_bwd, dgate, dup, gate, up, dout, n)
}
float exp_shift_inplace(float* x, size_t n, float shift) {
  TRAINER_DISPATCH(exp_shift_inplace, x, n, shift)
}
float exp_shift_sum(const float* x, size_t n, float shift) {
  TRAINER_DISPATCH(exp_shift_sum, x, n, shift)
}
float max_of(const float* x, size_t n) { TRAINER_DISPATCH(max_of, x, n) }
void softmax_bwd_row(const float* p, float* d, size_t n) { TRAINER_DISPATCH(softmax_bwd_row, p, d, n) }
double sumsq(const float* x, size_t n) { TRAINER_DISPATCH(sumsq, x, n) }
void scale_inplace(float* x, float a, size_t n) { TRAINER_DISPATCH(scale_inplace, x, a, n) }
void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bias_corr1, float bias_corr2,
           float grad_scale) {
  TRAINER_DISPATCH(adamw, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bias_corr1,
                   bias_corr2, grad_scale)
}

}  // namespace trainer::cpu
