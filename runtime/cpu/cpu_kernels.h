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
// The widest set this CPU runs (AVX-512 needs F, BW, VL and DQ; AVX2 needs FMA too).
KernelSet widest_kernel_set();
// "auto" (the widest set this CPU runs), "avx512", "avx2" or "generic"
// against a CPU whose widest set is `widest`: the set, or a RecipeError
// (exit 2) naming `what` (the key or variable that said it) and what the
// CPU runs.
KernelSet resolve_kernel_set(const std::string& name, KernelSet widest,
                             const std::string& what = "runtime.cpu_kernels");
// The sets a CPU whose widest set is `widest` runs: "generic, avx2, avx512".
std::string kernel_sets_up_to(KernelSet widest);
// The set the kernels run from now on. Call it before threads use them.
void use_kernel_set(KernelSet s);
// The set that runs: the last use_kernel_set, else the widest.
KernelSet kernel_set();

}  // namespace trainer::cpu
