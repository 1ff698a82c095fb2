#include "runtime/backend.h"

#include "runtime/cpu/cpu_backend.h"
#include "runtime/errors.h"

#include <stdexcept>

namespace trainer {

std::unique_ptr<Backend> make_backend(const BackendOptions& opt) {
  if (opt.kind == "cpu") return std::make_unique<CpuBackend>(opt.threads);
  throw RecipeError("runtime.backend = \"" + opt.kind +
                    "\" is not available in this build (only \"cpu\")");
}

}  // namespace trainer

namespace trainer {

std::vector<float> host_copy(Backend& be, CRef src, size_t n) {
  std::vector<float> h(n);
  be.to_host(h.data(), src, n);
  return h;
}

Buffer Backend::alloc(size_t n, DType dt, Mem kind, Space space) {
  return Buffer(this, n ? allocate(n * dtype_size(dt), kind, space) : nullptr, n, dt, kind, space);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    be_ = o.be_, p_ = o.p_, count_ = o.count_, dt_ = o.dt_, category_ = o.category_, space_ = o.space_;
    o.p_ = nullptr, o.count_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (p_ && be_) be_->release(p_);
  p_ = nullptr, count_ = 0;
}

void* Buffer::host() {
  if (space_ != Space::Staging) throw std::logic_error("Buffer::host() on a device buffer");
  return p_;
}

}  // namespace trainer
