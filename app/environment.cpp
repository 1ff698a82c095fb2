#include "app/environment.h"

#include <cstdlib>

namespace trainer {

int launcher_local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* s = std::getenv(v); s && *s) return std::atoi(s);
  return -1;
}

std::string peak_cache_file() {
  if (const char* d = std::getenv("TRAINER_CACHE_DIR")) return std::string(d) + "/peak_gflops";
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/trainer/peak_gflops";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/trainer/peak_gflops";
  return "";
}

int supervisor_launch() {
  const char* a = std::getenv("TRAINER_ATTEMPT");
  return a && *a ? std::atoi(a) : -1;
}

std::string start_marks_dir() {
  const char* d = std::getenv("TRAINER_START_MARKS");
  return d ? d : "";
}

std::string tokenizer_dir() {
  const char* d = std::getenv("TRAINER_TOKENIZER_DIR");
  return d ? d : "";
}

}  // namespace trainer
