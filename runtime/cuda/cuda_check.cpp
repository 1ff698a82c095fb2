#include "runtime/cuda/cuda_check.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdexcept>

namespace trainer::cuda {

void fail(const std::string& library, const std::string& message, const char* expr, const char* file,
          int line) {
  throw std::runtime_error(library + " error: " + message + " (in " + expr + " at " + file + ":" +
                           std::to_string(line) + ")");
}

void check_cuda(int err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky non-fatal error so the message is this one
  fail("CUDA", cudaGetErrorString((cudaError_t)err), expr, file, line);
}

void check_cublas(int status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail("cuBLASLt", cublasLtGetStatusString((cublasStatus_t)status), expr, file, line);
}

}  // namespace trainer::cuda
