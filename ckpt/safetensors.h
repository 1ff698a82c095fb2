#pragma once
// safetensors, the tensor file Hugging Face loaders read: a little-endian
// u64 header length N, N bytes of JSON ({name: {dtype, shape,
// data_offsets: [begin, end]}}, offsets relative to the data; optional
// "__metadata__" of strings), padded with spaces to a multiple of 8, then
// the raw little-endian data. A model past max_shard_bytes is split into
// model-0000K-of-0000N.safetensors with model.safetensors.index.json
// (weight_map: tensor -> file), as save_pretrained does.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace trainer {

struct SafeTensor {
  std::string name;
  DType dtype = DType::F32;  // F32 or BF16
  std::vector<int> shape;
  std::vector<uint8_t> bytes;
};

// Writes the tensors (in the order given) into dir, each file through a
// temporary name renamed when whole. Returns the file names written. Throws
// CheckpointError (a full disk: the message says so; no partial file stays).
std::vector<std::string> write_safetensors(const std::string& dir, const std::vector<SafeTensor>& tensors,
                                           size_t max_shard_bytes,
                                           const std::map<std::string, std::string>& metadata);

// Every tensor of a model directory (model.safetensors, or the shards its
// index names) widened to fp32, by name. Throws CheckpointError naming the
// file and what is wrong with it.
struct LoadedTensor {
  std::vector<int> shape;
  std::vector<float> data;
};
std::map<std::string, LoadedTensor> read_safetensors_dir(const std::string& dir);

}  // namespace trainer
