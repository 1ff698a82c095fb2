#pragma once
// A float as the text that wrote it: 1e-5f read back as the double 1e-05,
// not widened to 9.999999747378752e-06. The shortest decimal that reads back
// as the same float (std::to_chars), read as a double: what a recipe printed
// and an exported config.json show.
#include <charconv>
#include <cstdlib>

namespace trainer {

inline double float_as_written(float x) {
  char b[32];
  *std::to_chars(b, b + sizeof b - 1, x).ptr = 0;
  return std::strtod(b, nullptr);
}

}  // namespace trainer
