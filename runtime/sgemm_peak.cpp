#include "runtime/sgemm_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace trainer {

double measure_gemm_gflops(Backend& be, int n, double seconds, DType dt, GemmRate rate) {
  const size_t nn = (size_t)n * n;
  Buffer a = be.alloc(nn, dt, Mem::Temporaries);
  Buffer b = be.alloc(nn, dt, Mem::Temporaries);
  Buffer c = be.alloc(nn, dt, Mem::Temporaries);
  Buffer f = be.alloc(nn, DType::F32, Mem::Temporaries);
  std::vector<float> h(nn);
  for (size_t i = 0; i < nn; i++) h[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
  be.from_host(f.ref(), h.data(), nn);
  be.convert(a.ref(), f.ref(), nn);
  be.convert(b.ref(), f.ref(), nn);
  be.matmul(false, false, n, n, n, 1.f, a.ref(), b.ref(), 0.f, c.ref());  // warm-up
  // Several timed calls: the best of them (GemmRate::Best: shared machines
  // add noise only upward), or all of them over their whole time.
  double best = 0;
  const auto t_start = std::chrono::steady_clock::now();
  const auto t_end = t_start + std::chrono::duration<double>(seconds);
  int reps = 0;
  do {
    const auto t0 = std::chrono::steady_clock::now();
    be.matmul(false, false, n, n, n, 1.f, a.ref(), b.ref(), 0.f, c.ref());
    be.synchronize();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * (double)n * n / dt / 1e9);
    reps++;
  } while (reps < 3 || std::chrono::steady_clock::now() < t_end);
  if (rate == GemmRate::Best) return best;
  const double all = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return reps * 2.0 * n * (double)n * n / all / 1e9;
}

GemmProbe gemm_probe(const Backend& be, DType precision, int cpu_n) {
  return be.device_name().empty() ? GemmProbe{cpu_n, DType::F32} : GemmProbe{4096, precision};
}

KnownPeak known_peak(const Backend& be, DType precision) {
  KnownPeak k;
  k.gflops = be.known_peak_gflops(precision);
  if (k.gflops > 0) k.source = "data sheet: " + be.device_name() + ", " + dtype_name(precision) + " dense";
  return k;
}

}  // namespace trainer
