#include "runtime/host_name.h"

#include <unistd.h>

namespace trainer {

std::string host_name() {
  char h[256] = {0};
  if (gethostname(h, sizeof h - 1) != 0) return "unknown-host";
  return h;
}

bool same_host(const std::string& a, const std::string& b) {
  return a == b || (!a.empty() && a.substr(0, a.find('.')) == b.substr(0, b.find('.')));
}

}  // namespace trainer
