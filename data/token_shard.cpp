#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/errors.h"

namespace trainer {

TokenShard::TokenShard(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw DataError(path + ": cannot open token shard: " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw DataError(path + ": is a directory, not a token shard; name the shard files, e.g. \"" + path +
                    "/train_*.bin\"");
  }
  const size_t bytes = (size_t)st.st_size;
  if (bytes < kShardHeaderBytes) {
    ::close(fd);
    throw DataError(path + ": truncated token shard: " + std::to_string(bytes) +
                    " bytes, shorter than the " + std::to_string(kShardHeaderBytes) +
                    "-byte header");
  }
  map_ = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw DataError(path + ": cannot map token shard: " + std::strerror(errno));
  }
  map_bytes_ = bytes;
  const auto* hdr = static_cast<const int32_t*>(map_);
  if (hdr[0] != kShardMagic)
    throw DataError(path + ": not a token shard: magic at byte offset 0 is " +
                    std::to_string(hdr[0]) + ", expected " + std::to_string(kShardMagic) +
                    " (make shards with `trainer data prepare`)");
  if (hdr[1] != 1 && hdr[1] != 2)
    throw DataError(path + ": unsupported token shard version " + std::to_string(hdr[1]) +
                    " at byte offset 4 (supported: 1 = uint16 tokens, 2 = uint32 tokens)");
  if (hdr[2] < 0)
    throw DataError(path + ": negative token count in header at byte offset 8");
  width_ = hdr[1] == 1 ? 2 : 4;
  count_ = (size_t)hdr[2];
  const size_t want = kShardHeaderBytes + count_ * width_;
  if (bytes < want)
    throw DataError(path + ": truncated token shard: header promises " +
                    std::to_string(count_) + " tokens (" + std::to_string(want) +
                    " bytes) but the file has " + std::to_string(bytes) + " bytes; data ends at token " +
                    std::to_string((bytes - kShardHeaderBytes) / width_));
  if (bytes > want)
    throw DataError(path + ": the header at byte offset 8 says " + std::to_string(count_) + " tokens (" +
                    std::to_string(want) + " bytes) but the file has " + std::to_string(bytes) +
                    " bytes: the count is wrong or the file was appended to; rewrite the shard");
  data_ = static_cast<const unsigned char*>(map_) + kShardHeaderBytes;
}

uint32_t TokenShard::max_token(size_t* where) const {
  // A plain max over the typed array (vectorised: ~GB/s), then one pass for
  // the place of the largest.
  auto top_of = [&](const auto* p) {
    uint32_t best = 0;
    for (size_t i = 0; i < count_; i++) best = std::max<uint32_t>(best, p[i]);
    return best;
  };
  const uint32_t best = width_ == 2 ? top_of(reinterpret_cast<const uint16_t*>(data_))
                                    : top_of(reinterpret_cast<const uint32_t*>(data_));
  if (where)
    for (size_t i = 0; i < count_; i++)
      if (token(i) == best) {
        *where = i;
        break;
      }
  return best;
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), map_bytes_(o.map_bytes_), data_(o.data_),
      count_(o.count_), width_(o.width_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
  const bool narrow = std::all_of(tokens.begin(), tokens.end(), [](uint32_t t) { return t < 65536; });
  int32_t hdr[kShardHeaderInts] = {0};
  hdr[0] = kShardMagic;
  hdr[1] = narrow ? 1 : 2;
  hdr[2] = (int32_t)tokens.size();
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw DataError(tmp + ": cannot write: " + std::strerror(errno));
  bool ok = std::fwrite(hdr, sizeof(hdr), 1, f) == 1;
  if (narrow) {
    std::vector<uint16_t> t16(tokens.begin(), tokens.end());
    ok = ok && std::fwrite(t16.data(), 2, t16.size(), f) == t16.size();
  } else {
    ok = ok && std::fwrite(tokens.data(), 4, tokens.size(), f) == tokens.size();
  }
  ok = (std::fflush(f) == 0) && ok && ::fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw DataError(path + ": failed writing token shard: " + std::strerror(errno));
  }
}

}  // namespace trainer
