#include "runtime/version.h"

namespace trainer {

// Weak: the executable's definition (app/cmd_version.cpp) wins where linked.
__attribute__((weak)) const char* trainer_git_commit() { return "unknown"; }

}  // namespace trainer
