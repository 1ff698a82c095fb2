#include "planning/null_comm.h"

#include <cstring>

namespace trainer {

void NullControlComm::allgather(const float* in, float* out, size_t n) {
  for (int r = 0; r < size_; r++) std::memcpy(out + r * n, in, n * sizeof(float));
}

void NullControlComm::allgather_bytes(const void* in, void* out, size_t bytes) {
  for (int r = 0; r < size_; r++) std::memcpy(static_cast<char*>(out) + r * bytes, in, bytes);
}

}  // namespace trainer
