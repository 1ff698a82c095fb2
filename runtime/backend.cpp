#include "runtime/backend.h"

#include "runtime/cpu/cpu_backend.h"
#include "runtime/errors.h"

namespace trainer {

std::unique_ptr<Backend> make_backend(const BackendOptions& opt) {
  if (opt.kind == "cpu") return std::make_unique<CpuBackend>(opt.threads);
  throw RecipeError("runtime.backend = \"" + opt.kind +
                    "\" is not available in this build (only \"cpu\")");
}

}  // namespace trainer
