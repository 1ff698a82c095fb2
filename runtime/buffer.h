#pragma once
// A backend-owned buffer: element type, element count, memory category (what
// the memory accounting files it under) and memory space. Move-only; it
// returns its memory to the backend that allocated it. Code outside the
// backend reaches the elements only through the backend: as a Ref for
// kernels and collectives, or by explicit copies to and from host memory.
#include <cstddef>
#include <utility>

#include "runtime/memory.h"
#include "runtime/tensor_ref.h"

namespace trainer {

class Backend;

enum class Space : uint8_t {
  Device,   // where the backend computes (host RAM for the CPU backend)
  Staging,  // host memory the backend copies to and from fastest (pinned on a GPU)
};

class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* be, void* p, size_t count, DType dt, Mem category, Space space)
      : be_(be), p_(p), count_(count), dt_(dt), category_(category), space_(space) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset();  // frees now

  DType dtype() const { return dt_; }
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * dtype_size(dt_); }
  Mem category() const { return category_; }
  Space space() const { return space_; }
  explicit operator bool() const { return p_ != nullptr; }

  // Element `offset` on, for kernels and collectives.
  Ref ref(size_t offset = 0) { return Ref(p_, dt_) + offset; }
  CRef ref(size_t offset = 0) const { return CRef(p_, dt_) + offset; }
  // Host memory itself (Space::Staging only): what HDF5 writes from and reads into.
  void* host();

 private:
  Backend* be_ = nullptr;
  void* p_ = nullptr;
  size_t count_ = 0;
  DType dt_ = DType::F32;
  Mem category_ = Mem::Temporaries;
  Space space_ = Space::Device;
};

}  // namespace trainer
