#pragma once
// Measures this process's single-precision matrix-product rate (GFLOP/s) with
// the backend's own matmul on square matrices: the "peak" MFU is relative to.
#include "runtime/backend.h"

namespace trainer {

double measure_sgemm_gflops(Backend& be, int n = 1536, double seconds = 0.5);

}  // namespace trainer
