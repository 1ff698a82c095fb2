#pragma once
// A set of token shards viewed as a sequence of training samples. Sample k of
// a shard is tokens [k*T, k*T + T] (T+1 tokens: inputs and shifted targets);
// samples never cross shard boundaries.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/token_shard.h"

namespace trainer {

// What `data prepare` recorded beside a token file (DIR/data_info.json):
// the tokenizer, the SPEC it was made with, its vocabulary size. nullopt
// when there is no such file; DataError when it is not valid JSON.
struct DataInfo {
  std::string tokenizer, spec;
  int64_t vocab_size = 0;
};
std::optional<DataInfo> read_data_info(const std::string& data_file);
// The tokenizer spec recorded beside the first file `pattern` matches, or ""
// when none is. Throws DataError (no match, a bad data_info.json).
std::string recorded_tokenizer(const std::string& pattern);

// Expands paths and shell globs (sorted, deduplicated). An entry that matches
// nothing throws DataError naming it.
std::vector<std::string> expand_paths(const std::vector<std::string>& patterns);

class TokenDataset {
 public:
  // Checks every token of every shard against the vocabulary up front
  // (check_vocab): a token id that no sample would read is still a sign of
  // data made for another vocabulary. read_sample checks what it reads too.
  TokenDataset(const std::vector<std::string>& files, int seq_len, int vocab_size, bool check_vocab = true);
  size_t num_samples() const { return total_; }
  int seq_len() const { return T_; }
  // Copies sample k into inputs[T] and targets[T]; throws DataError naming the
  // file and offset of any token id >= vocab_size.
  void read_sample(size_t k, int32_t* inputs, int32_t* targets) const;

 private:
  std::vector<TokenShard> shards_;
  std::vector<size_t> first_;  // first global sample index of each shard
  size_t total_ = 0;
  int T_, V_;
};

}  // namespace trainer
