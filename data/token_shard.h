#pragma once
// Token shard files in llm.c's format: a header of 256 int32 (magic 20240520,
// version, token count), then the tokens. Version 1 holds uint16 tokens (as
// llm.c writes them); version 2, our extension, holds uint32 tokens for
// vocabularies over 65536. Shards are memory-mapped read-only.
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

constexpr int32_t kShardMagic = 20240520;
constexpr int kShardHeaderInts = 256;
constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

class TokenShard {
 public:
  // Maps and checks the file; throws DataError naming the file on any defect.
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(TokenShard&& o) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  TokenShard& operator=(TokenShard&&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return count_; }
  int token_bytes() const { return width_; }
  uint32_t token(size_t i) const {
    return width_ == 2 ? reinterpret_cast<const uint16_t*>(data_)[i]
                       : reinterpret_cast<const uint32_t*>(data_)[i];
  }
  // The largest token id and (where) its index: a shard checked once
  // against the vocabulary at start-up, not only where a sample reads.
  uint32_t max_token(size_t* where = nullptr) const;
  // Byte offset in the file of token i (for error messages).
  size_t byte_offset(size_t i) const { return kShardHeaderBytes + i * width_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* data_ = nullptr;
  size_t count_ = 0;
  int width_ = 2;
};

// Writes a shard (version 1 if every token fits in uint16, else version 2)
// via a temporary file renamed into place, so a reader never sees half a file.
void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace trainer
