#pragma once
// Error checks for CUDA, cuBLASLt, cuDNN and NCCL calls: a failed call
// throws std::runtime_error naming the call, where it was made and the
// library's own message, so a crash report says which operation failed.
#include <string>

namespace trainer::cuda {

[[noreturn]] void fail(const std::string& library, const std::string& message, const char* expr,
                       const char* file, int line);
void check_cuda(int err, const char* expr, const char* file, int line);
void check_cublas(int status, const char* expr, const char* file, int line);

}  // namespace trainer::cuda

#define CUDA_CHECK(x) ::trainer::cuda::check_cuda((int)(x), #x, __FILE__, __LINE__)
#define CUBLAS_CHECK(x) ::trainer::cuda::check_cublas((int)(x), #x, __FILE__, __LINE__)
