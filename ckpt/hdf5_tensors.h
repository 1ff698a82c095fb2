#pragma once
// Named tensors in a plain HDF5 file (one dataset per tensor, global shape as
// the dataset shape), readable by h5py. Checkpoint shards build on this; the
// parity test uses it to hand weights and batches to the PyTorch reference.
#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace trainer {

class H5File {
 public:
  enum Mode { Read, Create };
  // Throws CheckpointError. Create builds the file in memory (size_hint:
  // bytes expected, to grow the image rarely); close() writes it.
  H5File(const std::string& path, Mode mode, size_t size_hint = 0);
  ~H5File();  // a created file that was not close()d is discarded
  // Writes a created file to disk (durably) and closes it; throws
  // CheckpointError with the reason, e.g. "No space left on device (needs
  // 12.3 MB, 4.1 MB free)", leaving no file behind.
  void close();
  struct Image;
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  void write(const std::string& name, const float* data, const std::vector<int>& shape);
  void write(const std::string& name, const int32_t* data, const std::vector<int>& shape);
  // bf16 as an HDF5 floating-point type of its own (sign bit 15, exponent
  // bits 7-14 with bias 127, mantissa bits 0-6), so any HDF5 reader converts
  // it to fp32 itself (h5py: dataset.astype("f4")).
  void write(const std::string& name, const bf16* data, const std::vector<int>& shape);
  void write_scalar(const std::string& name, double value);
  std::vector<float> read_floats(const std::string& name, std::vector<int>* shape = nullptr);
  std::vector<int32_t> read_ints(const std::string& name);
  bool has(const std::string& name) const;
  // Names of the datasets directly in a group ("" if the group is absent).
  std::vector<std::string> list(const std::string& group);
  void set_string_attr(const std::string& object, const std::string& attr, const std::string& v);
  // Integer-array attributes on a dataset.
  void set_attr(const std::string& dataset, const std::string& attr, const std::vector<int>& v);
  std::vector<int> get_attr(const std::string& dataset, const std::string& attr);
  // 64-bit ones, for element counts that may pass 2^31.
  void set_attr64(const std::string& dataset, const std::string& attr, const std::vector<int64_t>& v);
  std::vector<int64_t> get_attr64(const std::string& dataset, const std::string& attr);
  bool has_attr(const std::string& dataset, const std::string& attr);
  // Shape of a dataset.
  std::vector<int> shape(const std::string& name);
  // Reads rows [r0, r0 + rn) and columns [c0, c0 + cn) of a 2-D float
  // dataset into out, row-major; a 1-D dataset is one column (c0 = 0, cn = 1).
  void read_block(const std::string& name, size_t r0, size_t rn, size_t c0, size_t cn, float* out);

 private:
  void write_raw(const std::string& name, hid_t type, const void* data,
                 const std::vector<int>& shape);
  void read_raw(const std::string& name, hid_t type, std::vector<char>& out, size_t elem,
                std::vector<int>* shape);
  std::string path_;
  hid_t file_ = -1;
  std::unique_ptr<Image> image_;
};

// Bytes free for an unprivileged writer in dir (SIZE_MAX when unknown), and
// "needs X MB, Y MB free" for writing `need` bytes at path.
size_t free_bytes(const std::string& dir);
std::string free_space_text(const std::string& path, size_t need);

}  // namespace trainer
