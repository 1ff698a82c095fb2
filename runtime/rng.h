#pragma once
// A small, fully specified random generator (splitmix64 seeding, xoshiro256**)
// so that initial weights and sample orders are identical on every platform
// and standard library; std:: distributions are implementation-defined.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

namespace trainer {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t hash_string(const std::string& s) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 0) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (auto& v : s_) v = splitmix64(x);
  }
  Rng(uint64_t seed, const std::string& stream) : Rng(seed, hash_string(stream)) {}

  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  // Uniform in [0, n) without modulo bias (Lemire's method).
  uint64_t below(uint64_t n) {
    while (true) {
      const __uint128_t m = (__uint128_t)next() * n;
      const uint64_t lo = (uint64_t)m;
      if (lo >= n || lo >= (-n) % n) return (uint64_t)(m >> 64);
    }
  }
  double uniform() { return (next() >> 11) * 0x1.0p-53; }  // [0, 1)
  void fill_normal(float* x, size_t n, float std) {         // Box-Muller
    for (size_t i = 0; i < n; i += 2) {
      const double u1 = 1.0 - uniform(), u2 = uniform();
      const double r = std::sqrt(-2.0 * std::log(u1));
      x[i] = (float)(r * std::cos(2 * M_PI * u2) * std);
      if (i + 1 < n) x[i + 1] = (float)(r * std::sin(2 * M_PI * u2) * std);
    }
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace trainer
