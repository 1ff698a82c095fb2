#include "runtime/self_exe.h"

#include <unistd.h>

namespace trainer {

std::string self_executable() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  return n > 0 ? std::string(self, (size_t)n) : std::string();
}

}  // namespace trainer
