#pragma once
// Elementwise CPU kernels on one contiguous chunk, compiled three times (for
// AVX-512, AVX2 and baseline x86-64; cpu_kernels_impl.inc) and chosen at
// start-up, so the portable binary still uses wide vectors. exp is our own
// polynomial (Cephes-style, ~1 ulp in range) because glibc's scalar
// expf/tanhf calls do not vectorize; they dominated the step before (GELU
// alone was ~30% of a GPT-2 124M step). The three sets return the same bits
// for the same input (fixed partial sums, no fused multiply-adds), so which
// one runs changes speed only.
#include <cstddef>
#include <string>

namespace trainer::cpu {

#include "runtime/cpu/cpu_kernel_decls.inc"

// The kernel sets, narrowest first.
enum class KernelSet { Generic, Avx2, Avx512 };
constexpr KernelSet kKernelSets[] = {KernelSet::Generic, KernelSet::Avx2, KernelSet::Avx512};

const char* kernel_set_name(KernelSet s);  // "generic", "avx2", "avx512"
// The sets "generic" up to `widest`, for messages: "generic, avx2, avx512".
std::string kernel_sets_up_to(KernelSet widest);

// What a process may run: the widest set of its CPU (AVX-512 needs F, BW,
// VL and DQ; AVX2 needs FMA too), capped by TRAINER_CPU_KERNELS, which
// makes a process act as one on a CPU without the wider sets (the whole test
// suite on an AVX-512 machine runs as on an AVX2 one).
struct KernelLimits {
  KernelSet cpu = KernelSet::Avx512;
  KernelSet cap = KernelSet::Avx512;
  KernelSet widest() const { return cpu < cap ? cpu : cap; }
};
KernelLimits kernel_limits();       // this process's
void cap_kernel_sets(KernelSet cap);  // before threads use the kernels

// "auto" (the widest set allowed), "avx512", "avx2" or "generic": the set,
// or a RecipeError (exit 2) naming `what` (the key or variable that said it),
// why the set is out of reach (the CPU or the cap) and what may run.
KernelSet resolve_kernel_set(const std::string& name, const KernelLimits& limits,
                             const std::string& what = "runtime.cpu_kernels");

// The set the kernels run from now on. Call it before threads use them.
void use_kernel_set(KernelSet s);
// The set that runs: the last use_kernel_set, else the widest allowed.
KernelSet kernel_set();

}  // namespace trainer::cpu
