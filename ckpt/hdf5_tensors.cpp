#include "ckpt/hdf5_tensors.h"

#include <cstring>

#include "runtime/errors.h"

namespace trainer {

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

H5File::H5File(const std::string& path, Mode mode) : path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // we report errors ourselves
  file_ = mode == Create ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)
                         : H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0)
    throw CheckpointError(path + ": cannot " + (mode == Create ? "create" : "open") +
                          " HDF5 file");
}

H5File::~H5File() {
  if (file_ >= 0) H5Fclose(file_);
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
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  const hid_t space = H5Screate_simple((int)dims.size(), dims.data(), nullptr);
  const hid_t lcpl = intermediate_groups();
  const hid_t ds = H5Dcreate2(file_, name.c_str(), type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  H5Pclose(lcpl);
  const herr_t rc = ds < 0 ? -1 : H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(space);
  if (rc < 0) throw CheckpointError(path_ + ": cannot write dataset " + name);
}

void H5File::write(const std::string& name, const float* data, const std::vector<int>& shape) {
  write_raw(name, H5T_NATIVE_FLOAT, data, shape);
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
  if (rc < 0) throw CheckpointError(path_ + ": cannot write dataset " + name);
}

void H5File::set_attr(const std::string& dataset, const std::string& attr, const std::vector<int>& v) {
  const hid_t ds = H5Dopen2(file_, dataset.c_str(), H5P_DEFAULT);
  hsize_t n = v.size();
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t a = ds < 0 ? -1 : H5Acreate2(ds, attr.c_str(), H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT);
  const herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT, v.data());
  if (a >= 0) H5Aclose(a);
  H5Sclose(space);
  if (ds >= 0) H5Dclose(ds);
  if (rc < 0) throw CheckpointError(path_ + ": cannot write attribute " + attr + " of " + dataset);
}

std::vector<int> H5File::get_attr(const std::string& dataset, const std::string& attr) {
  const hid_t ds = H5Dopen2(file_, dataset.c_str(), H5P_DEFAULT);
  const hid_t a = ds < 0 ? -1 : H5Aopen(ds, attr.c_str(), H5P_DEFAULT);
  std::vector<int> v;
  herr_t rc = -1;
  if (a >= 0) {
    const hid_t space = H5Aget_space(a);
    v.resize(H5Sget_simple_extent_npoints(space));
    H5Sclose(space);
    rc = H5Aread(a, H5T_NATIVE_INT, v.data());
    H5Aclose(a);
  }
  if (ds >= 0) H5Dclose(ds);
  if (rc < 0) throw CheckpointError(path_ + ": cannot read attribute " + attr + " of " + dataset);
  return v;
}

std::vector<int> H5File::shape(const std::string& name) {
  const hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw CheckpointError(path_ + ": no dataset " + name);
  std::vector<int> s;
  dataset_extent(ds, &s);
  H5Dclose(ds);
  return s;
}

void H5File::read_range(const std::string& name, int dim, int start, int count, float* out) {
  const hid_t ds = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw CheckpointError(path_ + ": no dataset " + name);
  const hid_t space = H5Dget_space(ds);
  const int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(nd), off(nd, 0), cnt(nd);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  cnt = dims;
  off[dim] = start;
  cnt[dim] = count;
  H5Sselect_hyperslab(space, H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr);
  const hid_t mem = H5Screate_simple(nd, cnt.data(), nullptr);
  const herr_t rc = H5Dread(ds, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, out);
  H5Sclose(mem);
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
  if (rc < 0) throw CheckpointError(path_ + ": cannot write attribute " + attr);
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
