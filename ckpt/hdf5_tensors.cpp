#include "ckpt/hdf5_tensors.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "runtime/errors.h"
#include "runtime/regular_file.h"

namespace trainer {

// HDF5's innermost error message, plus the system's when there was one.
std::string hdf5_error_text(int err) {
  std::string inner;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD,
           [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
             if (e->desc && *e->desc) *static_cast<std::string*>(out) = e->desc;
             return 0;
           },
           &inner);
  H5Eclear2(H5E_DEFAULT);
  if (err) return std::strerror(err);
  return inner.empty() ? "HDF5 error" : inner;
}

namespace {
size_t dataset_extent(hid_t ds, std::vector<int>* shape) {
  const hid_t space = H5Dget_space(ds);
  const int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(nd > 0 ? nd : 0);
  if (nd > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  H5Sclose(space);
  size_t n = 1;
  if (shape) shape->clear();
  for (hsize_t d : dims) {
    n *= d;
    if (shape) shape->push_back((int)d);
  }
  return n;
}
}  // namespace

// A file being created lives in memory (HDF5's core driver) and reaches the
// disk only in close(), by plain writes whose every error we see. HDF5 1.10
// cannot survive a failed close of a disk file (a full disk): it keeps the
// broken file and crashes when the library shuts down. The memory image is
// ours (these callbacks), so close() writes it without copying it again.
struct H5File::Image {
  void* mem = nullptr;  // HDF5's file image; ours once the file is closed
  size_t size = 0;      // its size: on close HDF5 shrinks it to the file's end
};

namespace {
void* image_malloc(size_t size, H5FD_file_image_op_t, void* u) {
  auto* img = static_cast<H5File::Image*>(u);
  img->size = size;
  return img->mem = std::malloc(size);
}
void* image_realloc(void* p, size_t size, H5FD_file_image_op_t, void* u) {
  void* q = std::realloc(p, size);
  if (q) static_cast<H5File::Image*>(u)->mem = q, static_cast<H5File::Image*>(u)->size = size;
  return q;
}
void* image_memcpy(void* dst, const void* src, size_t n, H5FD_file_image_op_t, void*) {
  return std::memcpy(dst, src, n);
}
herr_t image_free(void* p, H5FD_file_image_op_t op, void* u) {
  auto* img = static_cast<H5File::Image*>(u);
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && p == img->mem) return 0;  // close() writes, then frees it
  if (p == img->mem) img->mem = nullptr;
  std::free(p);
  return 0;
}
void* udata_copy(void* u) { return u; }
herr_t udata_free(void*) { return 0; }

// Writes n bytes to path durably; "" or the reason it failed.
std::string write_file(const std::string& path, const char* data, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  for (size_t done = 0; done < n;) {
    const ssize_t w = ::write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(path.c_str());
      return std::strerror(err);
    }
    done += (size_t)w;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return std::strerror(err);
  }
  return "";
}
}  // namespace

size_t free_bytes(const std::string& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return SIZE_MAX;  // unknown: let the write tell
  return (size_t)v.f_bavail * v.f_frsize;
}

std::string free_space_text(const std::string& path, size_t need) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const size_t free = free_bytes(dir.empty() ? "." : dir);
  char b[128];
  if (free == SIZE_MAX) std::snprintf(b, sizeof b, "needs %.1f MB", need / 1e6);
  else std::snprintf(b, sizeof b, "needs %.1f MB, %.1f MB free", need / 1e6, free / 1e6);
  return b;
}

H5File::H5File(const std::string& path, Mode mode, size_t size_hint) : path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // we report errors ourselves
  errno = 0;
  if (mode == Create) {
    image_ = std::make_unique<Image>();
    const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, std::max<size_t>(size_hint + (1 << 20), 1 << 20), 0);
    H5FD_file_image_callbacks_t cb = {image_malloc, image_memcpy, image_realloc, image_free,
                                      udata_copy,   udata_free,   image_.get()};
    H5Pset_file_image_callbacks(fapl, &cb);
    file_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
  } else {
    if (const std::string why = not_regular_file(path); !why.empty()) throw CheckpointError(path + ": " + why);
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  }
  if (file_ < 0)
    throw CheckpointError(path + ": cannot " + (mode == Create ? "create" : "open") +
                          " HDF5 file: " + hdf5_error_text(errno));
}

H5File::~H5File() {
  if (file_ >= 0) H5Fclose(file_);
  if (image_ && image_->mem) std::free(image_->mem);
}

void H5File::close() {
  if (file_ < 0) return;
  // The file's true size (the image beyond it is room to grow); asking with
  // no buffer copies nothing.
  const ssize_t eoa = image_ ? H5Fget_file_image(file_, nullptr, 0) : 0;
  const bool sized = eoa >= 0;
  const herr_t closed = H5Fclose(file_);  // in memory: the image stays with us
  file_ = -1;
  if (!sized || closed < 0) throw CheckpointError(path_ + ": cannot finish the HDF5 file: " + hdf5_error_text(0));
  if (!image_) return;
  const size_t size = std::min((size_t)eoa, image_->size);
  const std::string err = write_file(path_, static_cast<const char*>(image_->mem), (size_t)size);
  std::free(image_->mem);
  image_->mem = nullptr;
  if (!err.empty()) {
    const std::string space = err == std::strerror(ENOSPC) || err == std::strerror(EDQUOT)
                                  ? " (" + free_space_text(path_, (size_t)size) + ")" : "";
    throw CheckpointError(path_ + ": " + err + space);
  }
}

namespace {
// Link-creation properties that make "a/b/c" create groups a and a/b as needed.
hid_t intermediate_groups() {
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  return lcpl;
}
}  // namespace

void H5File::write_raw(const std::string& name, hid_t type, const void* data,
                       const std::vector<int>& shape) {
  errno = 0;
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  const hid_t space = H5Screate_simple((int)dims.size(), dims.data(), nullptr);
  const hid_t lcpl = intermediate_groups();
  const hid_t ds = H5Dcreate2(file_, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  H5Pclose(lcpl);
  const herr_t rc = ds < 0 ? -1 : H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(space);
  if (rc < 0) throw CheckpointError(path_ + ": cannot write dataset " + name + ": " + hdf5_error_text(errno));
}

void H5File::write(const std::string& name, const float* data, const std::vector<int>& shape) {
  write_raw(name, H5T_NATIVE_FLOAT, data, shape);
}
void H5File::write(const std::string& name, const bf16* data, const std::vector<int>& shape) {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  const bool ok = t >= 0 && H5Tset_fields(t, 15, 7, 8, 0, 7) >= 0 && H5Tset_precision(t, 16) >= 0 &&
                  H5Tset_offset(t, 0) >= 0 && H5Tset_size(t, 2) >= 0 && H5Tset_ebias(t, 127) >= 0;
  if (!ok) {
    if (t >= 0) H5Tclose(t);
    throw CheckpointError(path_ + ": cannot define HDF5's bf16 type for " + name);
  }
  try {
    write_raw(name, t, data, shape);
  } catch (...) {
    H5Tclose(t);
    throw;
  }
  H5Tclose(t);
}
void H5File::write(const std::string& name, const int32_t* data,
                   const std::vector<int>& shape) {
  write_raw(name, H5T_NATIVE_INT32, data, shape);
}
void H5File::write_scalar(const std::string& name, double value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t lcpl = intermediate_groups();
  const hid_t ds = H5Dcreate2(file_, name.c_str(), H5T_NATIVE_DOUBLE, space, lcpl, H5P_DEFAULT,
                              H5P_DEFAULT);
  H5Pclose(lcpl);
  const herr_t rc = ds < 0 ? -1 : H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value);
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(space);
  if (rc < 0) throw CheckpointError(path_ + ": cannot write dataset " + name + ": " + hdf5_error_text(errno));
}

namespace {

void write_attr(hid_t file, const std::string& path, const std::string& dataset, const std::string& attr,
                hid_t type, size_t n_values, const void* values) {
  const hid_t ds = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  hsize_t n = n_values;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t a = ds < 0 ? -1 : H5Acreate2(ds, attr.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  const herr_t rc = a < 0 ? -1 : H5Awrite(a, type, values);
  if (a >= 0) H5Aclose(a);
  H5Sclose(space);
  if (ds >= 0) H5Dclose(ds);
  if (rc < 0) throw CheckpointError(path + ": cannot write attribute " + attr + " of " + dataset + ": " + hdf5_error_text(errno));
}

template <typename T>
std::vector<T> read_attr(hid_t file, const std::string& path, const std::string& dataset, const std::string& attr,
                         hid_t type) {
  const hid_t ds = H5Dopen2(file, dataset.c_str(), H5P_DEFAULT);
  const hid_t a = ds < 0 ? -1 : H5Aopen(ds, attr.c_str(), H5P_DEFAULT);
  std::vector<T> v;
  herr_t rc = -1;
  if (a >= 0) {
    const hid_t space = H5Aget_space(a);
    v.resize(H5Sget_simple_extent_npoints(space));
    H5Sclose(space);
    rc = H5Aread(a, type, v.data());
    H5Aclose(a);
  }
  if (ds >= 0) H5Dclose(ds);
  if (rc < 0) throw CheckpointError(path + ": cannot read attribute " + attr + " of " + dataset);
  return v;
}

}  // namespace

void H5File::set_attr(const std::string& dataset, const std::string& attr, const std::vector<int>& v) {
  write_attr(file_, path_, dataset, attr, H5T_NATIVE_INT, v.size(), v.data());
}

std::vector<int> H5File::get_attr(const std::string& dataset, const std::string& attr) {
  return read_attr<int>(file_, path_, dataset, attr, H5T_NATIVE_INT);
}

void H5File::set_attr64(const std::string& dataset, const std::string& attr, const std::vector<int64_t>& v) {
  write_attr(file_, path_, dataset, attr, H5T_NATIVE_INT64, v.size(), v.data());
}

std::vector<int64_t> H5File::get_attr64(const std::string& dataset, const std::string& attr) {
  return read_attr<int64_t>(file_, path_, dataset, attr, H5T_NATIVE_INT64);
}

bool H5File::has_attr(const std::string& dataset, const std::string& attr) {
  return H5Aexists_by_name(file_, dataset.c_str(), attr.c_str(), H5P_DEFAULT) > 0;
}

std::vector<int> H5File::shape(const std::string& name) {
  const hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw CheckpointError(path_ + ": no dataset " + name);
  std::vector<int> s;
  dataset_extent(ds, &s);
  H5Dclose(ds);
  return s;
}

void H5File::read_block(const std::string& name, size_t r0, size_t rn, size_t c0, size_t cn, float* out) {
  const hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw CheckpointError(path_ + ": no dataset " + name);
  const hid_t space = H5Dget_space(ds);
  const int nd = H5Sget_simple_extent_ndims(space);
  hsize_t off[2] = {r0, c0}, cnt[2] = {rn, cn};
  herr_t rc = -1;
  if ((nd == 1 && c0 == 0 && cn == 1) || nd == 2) {
    H5Sselect_hyperslab(space, H5S_SELECT_SET, off, nullptr, cnt, nullptr);
    const hid_t mem = H5Screate_simple(nd, cnt, nullptr);
    rc = H5Dread(ds, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, out);
    H5Sclose(mem);
  }
  H5Sclose(space);
  H5Dclose(ds);
  if (rc < 0) throw CheckpointError(path_ + ": cannot read " + name);
}

std::vector<std::string> H5File::list(const std::string& group) {
  std::vector<std::string> out;
  if (!has(group)) return out;
  const hid_t g = H5Gopen2(file_, group.c_str(), H5P_DEFAULT);
  if (g < 0) return out;
  H5G_info_t info;
  H5Gget_info(g, &info);
  for (hsize_t i = 0; i < info.nlinks; i++) {
    char name[1024];
    if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) > 0)
      out.push_back(name);
  }
  H5Gclose(g);
  return out;
}

void H5File::set_string_attr(const std::string& object, const std::string& attr, const std::string& v) {
  const hid_t obj = H5Oopen(file_, object.c_str(), H5P_DEFAULT);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, v.size() + 1);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = obj < 0 ? -1 : H5Acreate2(obj, attr.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  const herr_t rc = a < 0 ? -1 : H5Awrite(a, type, v.c_str());
  if (a >= 0) H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
  if (obj >= 0) H5Oclose(obj);
  if (rc < 0) throw CheckpointError(path_ + ": cannot write attribute " + attr + ": " + hdf5_error_text(errno));
}

bool H5File::has(const std::string& name) const {
  return H5Lexists(file_, name.c_str(), H5P_DEFAULT) > 0;
}


void H5File::read_raw(const std::string& name, hid_t type, std::vector<char>& out,
                      size_t elem, std::vector<int>* shape) {
  const hid_t ds = has(name) ? H5Dopen2(file_, name.c_str(), H5P_DEFAULT) : -1;
  if (ds < 0) throw CheckpointError(path_ + ": no dataset " + name);
  out.resize(dataset_extent(ds, shape) * elem);
  const herr_t rc = H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data());
  H5Dclose(ds);
  if (rc < 0) throw CheckpointError(path_ + ": cannot read dataset " + name);
}

std::vector<float> H5File::read_floats(const std::string& name, std::vector<int>* shape) {
  std::vector<char> raw;
  read_raw(name, H5T_NATIVE_FLOAT, raw, sizeof(float), shape);
  std::vector<float> out(raw.size() / sizeof(float));
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::vector<int32_t> H5File::read_ints(const std::string& name) {
  std::vector<char> raw;
  read_raw(name, H5T_NATIVE_INT32, raw, sizeof(int32_t), nullptr);
  std::vector<int32_t> out(raw.size() / sizeof(int32_t));
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

}  // namespace trainer
