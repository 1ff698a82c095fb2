#include "runtime/rope.h"

#include <charconv>
#include <cmath>

namespace trainer {

std::string rope_scaling_problem(const RopeScaling& s) {
  if (s.type == RopeScaling::Type::None) return "";
  const auto num = [](double x) { return std::to_string(x); };
  if (!std::isfinite(s.factor) || s.factor < 1) return "factor must be >= 1, got " + num(s.factor);
  if (!std::isfinite(s.low_freq_factor) || s.low_freq_factor <= 0)
    return "low_freq_factor must be > 0, got " + num(s.low_freq_factor);
  if (!std::isfinite(s.high_freq_factor) || s.high_freq_factor <= s.low_freq_factor)
    return "high_freq_factor must be > low_freq_factor = " + num(s.low_freq_factor) + ", got " + num(s.high_freq_factor);
  if (s.original_max_position_embeddings < 1)
    return "original_max_position_embeddings must be >= 1, got " + std::to_string(s.original_max_position_embeddings);
  return "";
}

std::string rope_scaling_toml(const RopeScaling& s) {
  if (s.type == RopeScaling::Type::None) return "{}";
  const auto num = [](double x) {  // the shortest text that reads back the same, a TOML float
    char b[40];
    *std::to_chars(b, b + sizeof b - 1, x).ptr = 0;
    std::string t = b;
    return t.find_first_of(".eni") == std::string::npos ? t + ".0" : t;
  };
  return "{ rope_type = \"llama3\", factor = " + num(s.factor) + ", low_freq_factor = " + num(s.low_freq_factor) +
         ", high_freq_factor = " + num(s.high_freq_factor) +
         ", original_max_position_embeddings = " + std::to_string(s.original_max_position_embeddings) + " }";
}

}  // namespace trainer
