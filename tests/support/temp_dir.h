// A fresh directory under the system's temporary directory, named for the
// test and this process (tests of one binary may run side by side under ctest).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace trainer {

inline std::string temp_dir(const char* name) {
  const std::string d = std::filesystem::temp_directory_path() / (std::string(name) + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace trainer
