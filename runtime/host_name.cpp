#include "runtime/host_name.h"

#include <arpa/inet.h>
#include <unistd.h>

namespace trainer {

std::string host_name() {
  char h[256] = {0};
  if (gethostname(h, sizeof h - 1) != 0) return "unknown-host";
  return h;
}

namespace {

bool ip_literal(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

}  // namespace

bool same_host(const std::string& a, const std::string& b) {
  if (a == b) return true;
  if (a.empty() || b.empty() || ip_literal(a) || ip_literal(b)) return false;
  // Only a short name matches a qualified one: "n1.x" and "n1.y" are two hosts.
  const bool a_short = a.find('.') == std::string::npos, b_short = b.find('.') == std::string::npos;
  if (a_short == b_short) return false;
  const std::string& shortn = a_short ? a : b;
  const std::string& full = a_short ? b : a;
  return full.compare(0, shortn.size(), shortn) == 0 && full[shortn.size()] == '.';
}

}  // namespace trainer
