// Runs the kernels of one set: the one use_kernel_set picked
// (runtime.cpu_kernels), else the widest allowed (the CPU's, capped by
// TRAINER_CPU_KERNELS).
#include "runtime/cpu/cpu_kernels.h"

#include <atomic>

#include "runtime/errors.h"

namespace trainer::cpu {

namespace avx512 {
#include "runtime/cpu/cpu_kernel_decls.inc"
}
namespace avx2 {
#include "runtime/cpu/cpu_kernel_decls.inc"
}
namespace generic {
#include "runtime/cpu/cpu_kernel_decls.inc"
}

const char* kernel_set_name(KernelSet s) {
  switch (s) {
    case KernelSet::Avx512: return "avx512";
    case KernelSet::Avx2: return "avx2";
    default: return "generic";
  }
}

std::string kernel_sets_up_to(KernelSet widest) {
  std::string runs;
  for (KernelSet s : kKernelSets)
    if (s <= widest) runs += std::string(runs.empty() ? "" : ", ") + kernel_set_name(s);
  return runs;
}

namespace {

KernelSet cpu_widest() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return KernelSet::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KernelSet::Avx2;
  return KernelSet::Generic;
}

// Constant-initialised (-1: not set), so that a cap_kernel_sets from another
// file's static initialiser (tests/support/kernel_set_from_env.cpp) is not undone.
std::atomic<int> cap{-1};
std::atomic<int> chosen{-1};

}  // namespace

KernelLimits kernel_limits() {
  static const KernelSet cpu = cpu_widest();
  const int c = cap.load(std::memory_order_relaxed);
  return {cpu, c < 0 ? KernelSet::Avx512 : (KernelSet)c};
}

void cap_kernel_sets(KernelSet c) {
  cap.store((int)c, std::memory_order_relaxed);
  if (chosen.load(std::memory_order_relaxed) > (int)c) chosen.store((int)c, std::memory_order_relaxed);
}

KernelSet resolve_kernel_set(const std::string& name, const KernelLimits& limits, const std::string& what) {
  if (name == "auto") return limits.widest();
  for (KernelSet s : kKernelSets) {
    if (name != kernel_set_name(s)) continue;
    if (s <= limits.widest()) return s;
    const std::string why =
        s > limits.cpu ? std::string("this CPU lacks ") +
                             (s == KernelSet::Avx512 ? "AVX-512 (F, BW, VL and DQ)" : "AVX2 with FMA")
                       : std::string("TRAINER_CPU_KERNELS = \"") + kernel_set_name(limits.cap) +
                             "\" caps this process there (unset it to run what the CPU runs: " +
                             kernel_sets_up_to(limits.cpu) + ")";
    throw RecipeError(what + " = \"" + name + "\" but " + why + "; the sets allowed are " +
                      kernel_sets_up_to(limits.widest()) + " (\"auto\" picks " + kernel_set_name(limits.widest()) + ")");
  }
  throw RecipeError(what + " = \"" + name + "\" is not a kernel set: \"auto\", \"avx512\", \"avx2\" or \"generic\"");
}

void use_kernel_set(KernelSet s) { chosen.store((int)s, std::memory_order_relaxed); }

KernelSet kernel_set() {
  const int s = chosen.load(std::memory_order_relaxed);
  return s < 0 ? kernel_limits().widest() : (KernelSet)s;
}

#define TRAINER_DISPATCH(fn, ...)                                  \
  switch (kernel_set()) {                                          \
    case KernelSet::Avx512: return avx512::fn(__VA_ARGS__);        \
    case KernelSet::Avx2: return avx2::fn(__VA_ARGS__);            \
    default: return generic::fn(__VA_ARGS__);                      \
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
void exp_shift(float* x, size_t n, float shift) { TRAINER_DISPATCH(exp_shift, x, n, shift) }
double exp_shift_inplace(float* x, size_t n, float shift) {
  TRAINER_DISPATCH(exp_shift_inplace, x, n, shift)
}
double exp_shift_sum(const float* x, size_t n, float shift) {
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
