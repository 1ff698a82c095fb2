#pragma once
// What tests compare with: normal inputs from a fixed seed, and central
// differences of a reference written in double.
#include <cstddef>
#include <functional>
#include <random>
#include <vector>

namespace trainer::test_support {

inline std::vector<float> randn(size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// The gradient of f at x by central differences of step h.
inline std::vector<double> central_differences(const std::function<double(const std::vector<double>&)>& f,
                                               std::vector<double> x, double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = f(x);
    x[i] = x0 - h;
    g[i] = (up - f(x)) / (2 * h);
    x[i] = x0;
  }
  return g;
}

}  // namespace trainer::test_support
