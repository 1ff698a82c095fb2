#pragma once
// Row-major GEMMs through cuBLASLt: C[M,N] = alpha * op(A) op(B) + beta * C,
// as Backend::matmul defines it. bf16 inputs accumulate in fp32 (output bf16
// or fp32); fp32 inputs run in full fp32 unless TF32 was allowed. Operands of
// different element types are not mixed by cuBLASLt: the caller converts one.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "runtime/tensor_ref.h"

namespace trainer::cuda {

class LtGemm {
 public:
  LtGemm(void* workspace, size_t workspace_bytes, bool allow_tf32);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void run(cudaStream_t s, bool transA, bool transB, int M, int N, int K, float alpha, CRef A, CRef B, float beta,
           Ref C);

 private:
  // The heuristic's algorithm per shape, types and operand alignments (in
  // cuBLASLt's order: our B, our A, C), found once. cuBLASLt assumes
  // 256-byte-aligned operands unless told otherwise, and views into a
  // parameter buffer often are not.
  using Key = std::tuple<bool, bool, int, int, int, int, int, bool, uint32_t, uint32_t, uint32_t>;
  const cublasLtMatmulAlgo_t* algo(const Key& k, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                   cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  bool allow_tf32_;
  std::map<Key, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace trainer::cuda
