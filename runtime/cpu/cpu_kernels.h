#pragma once
// Elementwise CPU kernels on one contiguous chunk, compiled three times (for
// AVX-512, AVX2 and baseline x86-64; cpu_kernels_impl.inc) and chosen at
// start-up from the CPU, so the portable binary still uses wide vectors. exp is our own polynomial (Cephes-style, ~1 ulp
// in range) because glibc's scalar expf/tanhf calls do not vectorize; they
// dominated the step before (GELU alone was ~30% of a GPT-2 124M step).
#include <cstddef>

namespace trainer::cpu {


void gelu_fwd(float* out, const float* x, size_t n);
void gelu_bwd(float* dx, const float* x, const float* dout, size_t n);
void swiglu_fwd(float* out, const float* gate, const float* up, size_t n);
void swiglu_bwd(float* dgate, float* dup, const float* gate, const float* up, const float* dout,
                size_t n);
// x[i] = exp(x[i] - shift); returns the sum (in a fixed vector order).
float exp_shift_inplace(float* x, size_t n, float shift);
// sum of exp(x[i] - shift), x untouched.
float exp_shift_sum(const float* x, size_t n, float shift);
float max_of(const float* x, size_t n);
// Sum of squares accumulated in double (vector lanes summed in a fixed order).
double sumsq(const float* x, size_t n);
// Softmax backward on one row: d = p * (d - sum(p * d)).
void softmax_bwd_row(const float* p, float* d, size_t n);
void scale_inplace(float* x, float a, size_t n);
// AdamW on a chunk; the gradient is multiplied by grad_scale first (clipping).
void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bias_corr1, float bias_corr2,
           float grad_scale);

}  // namespace trainer::cpu
