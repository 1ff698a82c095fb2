#pragma once
// One file of tokens, memory-mapped read-only, in any of the formats the
// loader takes:
//   llm.c shards: 256 x int32 header (magic, version, token count), then the
//     tokens: magic 20240520 version 1 (uint16, GPT-2), version 2 (uint32,
//     this project's earlier wide shards), magic 20240801 version 7 (uint32,
//     llm.c's Llama-3 shards)
//   Megatron-LM indexed datasets: PREFIX.bin + PREFIX.idx (shard_writer.h),
//     named by the prefix, the .bin or the .idx; read as one token stream
//     (samples run across document boundaries, as Megatron's do by default)
// Every defect of a header or index stops with a DataError naming the file
// and the byte offset.
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardMagicLlama3 = 20240801;
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

  const std::string& path() const { return path_; }  // the token data file (a Megatron prefix's .bin)
  size_t size() const { return count_; }
  int token_bytes() const { return width_; }
  // "llm.c v1, uint16", "megatron, int32", ...
  std::string describe() const;
  // Documents in a Megatron index (0: not recorded, as in llm.c shards).
  size_t documents() const { return documents_; }
  // Signed codes read as uint32: a negative id becomes huge and fails the
  // vocabulary check, as it should.
  uint32_t token(size_t i) const {
    switch (width_) {
      case 1: return signed_ ? (uint32_t)(int32_t)reinterpret_cast<const int8_t*>(data_)[i] : data_[i];
      case 2: return signed_ ? (uint32_t)(int32_t)reinterpret_cast<const int16_t*>(data_)[i]
                             : reinterpret_cast<const uint16_t*>(data_)[i];
      case 4: return reinterpret_cast<const uint32_t*>(data_)[i];
      default: {
        const int64_t v = reinterpret_cast<const int64_t*>(data_)[i];
        return v < 0 || v > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)v;
      }
    }
  }
  // The largest token id and (where) its index: a shard checked once
  // against the vocabulary at start-up, not only where a sample reads.
  uint32_t max_token(size_t* where = nullptr) const;
  // Byte offset in path() of token i (for error messages).
  size_t byte_offset(size_t i) const { return header_bytes_ + i * width_; }
  // Throws DataError naming the file when it shrank under the mapping since
  // it was opened (rewritten or truncated in place): what was read past its
  // new end is zeros (runtime/mapped_reads.h). Readers call it after reading.
  void check_unchanged() const;

 private:
  void map(const std::string& file, size_t min_bytes, const char* what);
  void unmap();
  void open_llmc();
  void open_megatron(const std::string& prefix);

  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* data_ = nullptr;
  size_t count_ = 0, header_bytes_ = kShardHeaderBytes, documents_ = 0;
  int width_ = 2, version_ = 0;
  bool signed_ = false, megatron_ = false;
  int watch_ = -1;  // runtime/mapped_reads.h's handle for map_
};

// The Megatron prefix a path names ("x", "x.bin" or "x.idx" with both files
// present), or "" for an llm.c shard.
std::string megatron_prefix(const std::string& path);

// Writes PATH (ending in .bin) as one llm.c shard through shard_writer.h:
// version 1 if every token fits in uint16, else llm.c's version 7; via a
// temporary file renamed into place, so a reader never sees half a file.
void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace trainer
