#include "runtime/backend.h"

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/errors.h"

#include <stdexcept>

#ifdef TRAINER_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/nvml_state.h"
#endif

namespace trainer {

std::vector<std::string> compiled_backends() {
#ifdef TRAINER_WITH_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

std::string backend_library_versions() {
#ifdef TRAINER_WITH_CUDA
  return cuda::library_versions();
#else
  return "";
#endif
}

DeviceMemory device_memory(int local_rank, int ranks_on_node) {
  DeviceMemory m;
#ifdef TRAINER_WITH_CUDA
  m.devices = cuda::device_count();
  if (m.devices == 0) return m;
  const int dev = cuda::device_for_rank(local_rank, ranks_on_node).device;
  if (cudaSetDevice(dev) != cudaSuccess) return cudaGetLastError(), DeviceMemory{};
  const cuda::DeviceInfo d = cuda::device_info(dev);
  m.name = d.name, m.total = d.total_bytes;
  m.free = d.free_bytes ? d.free_bytes : d.total_bytes;
#else
  (void)local_rank, (void)ranks_on_node;
#endif
  return m;
}

NodeGpus node_gpus(const Backend& be) {
#ifdef TRAINER_WITH_CUDA
  if (const auto* gpu = dynamic_cast<const CudaBackend*>(&be)) return cuda::read_node_gpus(gpu->device());
#endif
  return {{}, "the " + be.name() + " backend computes on no GPU"};
}

namespace {
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opt) {
#ifdef TRAINER_WITH_CUDA
  const std::string why = cuda::no_device_reason();
  if (!why.empty()) throw RecipeError("runtime.backend = \"cuda\" but " + why + "; use runtime.backend = \"cpu\" here");
  const cuda::DeviceChoice c = cuda::device_for_rank(opt.local_rank, opt.ranks_on_node);
  return std::make_unique<CudaBackend>(CudaOptions{c.device, opt.allow_tf32, opt.deterministic_attention});
#else
  (void)opt;
  throw RecipeError("runtime.backend = \"cuda\" but this binary was built without the CUDA backend "
                    "(`trainer --version` lists the backends; rebuild on a machine with the CUDA toolkit)");
#endif
}
}  // namespace

std::unique_ptr<Backend> make_backend(const BackendOptions& opt) {
  if (opt.kind == "cpu") {
    // "auto": the widest set allowed (the CPU's, or TRAINER_CPU_KERNELS's cap: app/main.cpp).
    cpu::use_kernel_set(cpu::resolve_kernel_set(opt.cpu_kernels, cpu::kernel_limits()));
    return std::make_unique<CpuBackend>(opt.threads);
  }
  if (opt.kind == "cuda") return make_cuda_backend(opt);
  throw RecipeError("runtime.backend = \"" + opt.kind + "\" is not a backend (\"cpu\" or \"cuda\")");
}

}  // namespace trainer

namespace trainer {

void Backend::check_recorded(const Event& e) const {
  if (e.id > events_)
    throw std::logic_error("Backend: an event handle that was never recorded (id " + std::to_string(e.id) + ")");
}

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
