#pragma once
// The rotary embedding's frequencies: the base (rope_theta) and an optional
// scaling of them (Llama 3.1's "llama3" type), as one value every backend
// takes, and the one formula for them, compiled for the host and, in the
// CUDA kernels, for the device.
#include <cmath>
#ifndef __CUDACC__
#include <string>
#endif

#if defined(__CUDACC__)
#define TRAINER_HOST_DEVICE __host__ __device__
#else
#define TRAINER_HOST_DEVICE
#endif

namespace trainer {

// Hugging Face's rope_scaling / rope_parameters fields, by the same names.
struct RopeScaling {
  enum class Type { None, Llama3 };
  Type type = Type::None;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
  bool operator==(const RopeScaling& o) const {
    return type == o.type && (type == Type::None ||
                              (factor == o.factor && low_freq_factor == o.low_freq_factor &&
                               high_freq_factor == o.high_freq_factor &&
                               original_max_position_embeddings == o.original_max_position_embeddings));
  }
  bool operator!=(const RopeScaling& o) const { return !(*this == o); }
};

#ifndef __CUDACC__
// "" when the fields make sense (as transformers requires them: factor >= 1,
// 0 < low_freq_factor < high_freq_factor, a positive original length), else
// what is wrong, naming the field.
std::string rope_scaling_problem(const RopeScaling& s);
// As the recipe writes it: {} or { rope_type = "llama3", factor = 8.0, ... }.
std::string rope_scaling_toml(const RopeScaling& s);
#endif

struct RopeFreqs {
  float theta = 10000.f;
  RopeScaling scaling;
  bool operator==(const RopeFreqs& o) const { return theta == o.theta && scaling == o.scaling; }
  bool operator!=(const RopeFreqs& o) const { return !(*this == o); }
};

// The angle per position of pair i of a head of size hd, in double. With
// llama3 scaling (transformers' _compute_llama3_parameters): wavelengths
// shorter than original / high_freq_factor are kept, longer than original /
// low_freq_factor divided by factor, and those between blended linearly in
// original / wavelength.
TRAINER_HOST_DEVICE inline double rope_inv_freq(const RopeFreqs& r, int i, int hd) {
  const double f = pow((double)r.theta, -2.0 * i / hd);
  const RopeScaling& s = r.scaling;
  if (s.type != RopeScaling::Type::Llama3) return f;
  const double wavelen = 2.0 * 3.14159265358979323846 / f, old = s.original_max_position_embeddings;
  if (wavelen < old / s.high_freq_factor) return f;
  if (wavelen > old / s.low_freq_factor) return f / s.factor;
  const double smooth = (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * f / s.factor + smooth * f;
}

}  // namespace trainer
