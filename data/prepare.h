#pragma once
// Text -> byte-level token shards (vocabulary 256): the data command behind
// `trainer data prepare`. Files are read in sorted path order (directories
// recursively, symlinks to the same file counted once), concatenated, and the
// last val_fraction of the bytes becomes the validation shard.
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct PrepareConfig {
  std::vector<std::string> inputs;  // files or directories
  std::string output_dir;
  double val_fraction = 0.1;
  size_t shard_tokens = 100'000'000;  // tokens per train shard file
  // The output directory may hold shards (train_*.bin, val_*.bin) only with
  // overwrite, which removes that whole set first (a smaller new set would
  // otherwise leave old shards that a train_*.bin glob mixes in).
  bool overwrite = false;
};

struct PrepareResult {
  size_t files = 0, train_tokens = 0, val_tokens = 0;
  std::vector<std::string> empty_files;  // inputs with no bytes (skipped)
  size_t removed_shards = 0;             // old shards removed (overwrite)
  std::vector<std::string> train_shards, val_shards;
};

PrepareResult prepare_bytes(const PrepareConfig& cfg);

}  // namespace trainer
