#include "runtime/cuda/cublaslt_gemm.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/cuda/cuda_check.h"

namespace trainer::cuda {

namespace {
cudaDataType_t cuda_type(DType d) {
  if (d == DType::BF16) return CUDA_R_16BF;
  if (d == DType::F32) return CUDA_R_32F;
  throw std::logic_error("matmul on int32 data");
}

// The largest power of two (up to 256) that divides the address.
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256u : (uint32_t)std::min<uintptr_t>(256, a & (~a + 1));
}

// A column-major layout of `rows` x `cols` with leading dimension ld.
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(DType d, uint64_t rows, uint64_t cols, int64_t ld) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, cuda_type(d), rows, cols, ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(h); }
};
}  // namespace

LtGemm::LtGemm(void* workspace, size_t workspace_bytes, bool allow_tf32)
    : workspace_(workspace), workspace_bytes_(workspace_bytes), allow_tf32_(allow_tf32) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

LtGemm::~LtGemm() {
  if (handle_) cublasLtDestroy(handle_);
}

const cublasLtMatmulAlgo_t* LtGemm::algo(const Key& k, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                         cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c) {
  auto it = algos_.find(k);
  if (it != algos_.end()) return &it->second;
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes_, sizeof workspace_bytes_));
  const uint32_t align[3] = {std::get<8>(k), std::get<9>(k), std::get<10>(k)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; i++)
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &align[i < 3 ? i : 2], sizeof(uint32_t)));
  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, op, a, b, c, c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    fail("cuBLASLt", "no algorithm for this GEMM (M,N,K = " + std::to_string(std::get<2>(k)) + "," +
                         std::to_string(std::get<3>(k)) + "," + std::to_string(std::get<4>(k)) + ")",
         "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  return &algos_.emplace(k, result.algo).first->second;
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's
// first operand is our B, its second our A, and the result is N x M.
void LtGemm::run(cudaStream_t s, bool transA, bool transB, int M, int N, int K, float alpha, CRef A, CRef B,
                 float beta, Ref C) {
  if (A.dt != B.dt) throw std::logic_error("LtGemm: operands of different element types");
  const bool tf32 = allow_tf32_ && A.dt == DType::F32;
  cublasLtMatmulDesc_t op;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = transB ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const Layout la(B.dt, transB ? K : N, transB ? N : K, transB ? K : N);
  const Layout lb(A.dt, transA ? M : K, transA ? K : M, transA ? M : K);
  const Layout lc(C.dt, N, M, N);
  const Key key{transA, transB, M, N, K, (int)A.dt, (int)C.dt, beta != 0.f, alignment(B.p), alignment(A.p),
                alignment(C.p)};
  const cublasLtMatmulAlgo_t* al = algo(key, op, la.h, lb.h, lc.h);
  const cublasStatus_t st = cublasLtMatmul(handle_, op, &alpha, B.p, la.h, A.p, lb.h, &beta, C.p, lc.h, C.p, lc.h,
                                           al, workspace_, workspace_bytes_, s);
  cublasLtMatmulDescDestroy(op);
  CUBLAS_CHECK(st);
}

}  // namespace trainer::cuda
