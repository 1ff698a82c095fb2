// Named tensors through HDF5 and back (ckpt/hdf5_tensors.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ckpt/hdf5_tensors.h"
#include "runtime/errors.h"

using namespace trainer;

TEST(Hdf5, NamedTensorsRoundTrip) {
  char tmpl[] = "/tmp/trainer_h5_XXXXXX";
  const std::string path = std::string(mkdtemp(tmpl)) + "/t.h5";
  const std::vector<float> w = {1.5f, -2.f, 3.25f, 0.f, 7.f, 8.f};
  const std::vector<int32_t> tok = {3, 1, 4, 1, 5};
  {
    H5File f(path, H5File::Create);
    f.write("layers.0/attn.wq", w.data(), {2, 3});
    f.write("tokens", tok.data(), {5});
    f.close();
  }
  H5File f(path, H5File::Read);
  std::vector<int> shape;
  EXPECT_EQ(f.read_floats("layers.0/attn.wq", &shape), w);
  EXPECT_EQ(shape, (std::vector<int>{2, 3}));
  EXPECT_EQ(f.read_ints("tokens"), tok);
  EXPECT_FALSE(f.has("nope"));
  EXPECT_THROW(f.read_floats("nope"), CheckpointError);
}
