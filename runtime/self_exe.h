#pragma once
// This executable's real path (from /proc/self/exe), for what is found
// relative to it: the ranks a supervisor launches, the tokenizer files
// beside a build or an install, the re-exec that names the process.
#include <string>

namespace trainer {

// "" when the kernel does not say.
std::string self_executable();

}  // namespace trainer
