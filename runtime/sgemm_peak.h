#pragma once
// Measures this process's matrix-product rate (GFLOP/s) with the backend's
// own matmul on square matrices of element type dt: the "peak" MFU is
// relative to where no data-sheet figure is known (the CPU, unknown GPUs).
#include <string>

#include "runtime/backend.h"

namespace trainer {

// Best: the fastest of the timed calls (a peak: noise on a shared machine
// only slows calls). Sustained: all the calls' work over their whole time,
// what a node delivers over a step (a CPU quota lets a single short call
// through at full speed and throttles the rest: `trainer health`).
enum class GemmRate { Best, Sustained };
double measure_gemm_gflops(Backend& be, int n = 1536, double seconds = 0.5, DType dt = DType::F32,
                           GemmRate rate = GemmRate::Best);

// The peak for MFU: the device's data-sheet figure for the run's precision
// when the backend knows the device (GPUs in its table), else 0.
struct KnownPeak {
  double gflops = 0;
  std::string source;  // "data sheet: NVIDIA H200, bf16 dense"
};
KnownPeak known_peak(const Backend& be, DType precision);

// The product a peak is measured with where no data-sheet figure is known:
// on a GPU n = 4096 in the run's precision; on the CPU its sgemm (n = cpu_n,
// fp32 whatever the precision, as the CPU's MFU has always been).
struct GemmProbe {
  int n;
  DType dt;
};
GemmProbe gemm_probe(const Backend& be, DType precision, int cpu_n);

}  // namespace trainer
