#include "runtime/peak_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/cpu/blas_core.h"
#include "runtime/host_name.h"
#include "runtime/regular_file.h"
#include "runtime/replace_file.h"
#include "runtime/utc_time.h"

namespace trainer {

namespace {
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown cpu";
}
}  // namespace

std::string peak_cache_key(int threads, int ranks_on_node) {
  std::string key = host_name() + "|" + cpu_model() + "|blas " + blas_library_version() + "|threads " +
                    std::to_string(threads) + "|ranks " + std::to_string(ranks_on_node);
  for (char& c : key)
    if (c == '\t' || c == '\n') c = ' ';
  return key;
}

double read_cached_peak(const std::string& path, const std::string& key, std::string* when) {
  if (path.empty() || !not_regular_file(path).empty()) return 0;  // no cache: the peak is measured
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string k, g, w;
    if (std::getline(is, k, '\t') && std::getline(is, g, '\t') && std::getline(is, w) && k == key) {
      if (when) *when = w;
      return std::strtod(g.c_str(), nullptr);
    }
  }
  return 0;
}

namespace {
// The cache without the key's line, plus `line` when it is not empty.
bool rewrite_cache(const std::string& path, const std::string& key, const std::string& line_for_key) {
  if (path.empty()) return false;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::string text, line;
  std::ifstream f(not_regular_file(path).empty() ? path : "");  // a FIFO there is replaced, never read
  while (std::getline(f, line))
    if (line.rfind(key + "\t", 0) != 0) text += line + "\n";
  return replace_file(path, text + line_for_key, false).empty();
}
}  // namespace

bool write_cached_peak(const std::string& file, const std::string& key, double gflops) {
  return rewrite_cache(file, key, key + "\t" + std::to_string(gflops) + "\t" + utc_time("%Y-%m-%d %H:%M UTC") + "\n");
}

bool forget_cached_peak(const std::string& file, const std::string& key) { return rewrite_cache(file, key, ""); }

}  // namespace trainer
