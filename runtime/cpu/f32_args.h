#pragma once
// How the CPU backend computes on bf16: every kernel is written for fp32;
// F32Args hands it fp32 views of its typed arguments. fp32 arguments pass
// through untouched (so fp32 runs execute exactly the fp32 kernels); bf16
// inputs are widened into scratch, and bf16 outputs are computed in scratch
// and rounded back once when the F32Args goes out of scope. That is "bf16
// storage, fp32 arithmetic": the same numerics a GPU kernel has that loads
// bf16, computes in fp32 registers and stores bf16 (but with a copy each way,
// which costs time on the CPU; correctness is what it is for).
#include <memory>
#include <vector>

#include "runtime/tensor_ref.h"

namespace trainer {

void widen_to(float* dst, const bf16* src, size_t n);   // exact
void narrow_to(bf16* dst, const float* src, size_t n);  // round to nearest even

class F32Args {
 public:
  F32Args() = default;
  F32Args(const F32Args&) = delete;
  F32Args& operator=(const F32Args&) = delete;
  ~F32Args();
  // Read only.
  const float* in(CRef r, size_t n);
  // Written, not read (contents undefined until the kernel writes them).
  float* out(Ref r, size_t n);
  // Read and written (accumulating kernels, in-place ops).
  float* inout(Ref r, size_t n);

 private:
  float* scratch(size_t n);
  struct Pending {
    bf16* dst;
    const float* src;
    size_t n;
  };
  std::vector<std::unique_ptr<float[]>> scratch_;
  std::vector<Pending> back_;
};

}  // namespace trainer
