#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "data/shard_writer.h"
#include "runtime/errors.h"
#include "runtime/mapped_reads.h"
#include "runtime/regular_file.h"

namespace trainer {

namespace {
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
std::string strip(const std::string& p, const char* ext) {
  const size_t n = std::strlen(ext);
  return p.size() > n && p.compare(p.size() - n, n, ext) == 0 ? p.substr(0, p.size() - n) : "";
}
template <class T>
T read_at(const unsigned char* base, size_t off) {
  T v;
  std::memcpy(&v, base + off, sizeof(T));
  return v;
}
}  // namespace

std::string megatron_prefix(const std::string& path) {
  for (const char* ext : {".idx", ".bin"})
    if (const std::string p = strip(path, ext); !p.empty() && exists(p + ".idx") && exists(p + ".bin")) return p;
  if (!exists(path) && exists(path + ".idx") && exists(path + ".bin")) return path;
  return "";
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
  const std::string prefix = megatron_prefix(path);
  if (prefix.empty()) open_llmc();
  else open_megatron(prefix);
}

void TokenShard::map(const std::string& file, size_t min_bytes, const char* what) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK);  // a FIFO does not block the open
  if (fd < 0) throw DataError(file + ": cannot open " + what + ": " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw DataError(file + ": is a directory, not a token shard; name the shard files, e.g. \"" + file +
                    "/train_*.bin\"");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(file + ": " + not_regular_file(file) + " (" + what + ")");
  }
  const size_t bytes = (size_t)st.st_size;
  if (bytes < min_bytes) {
    ::close(fd);
    throw DataError(file + ": truncated " + what + ": " + std::to_string(bytes) + " bytes, shorter than the " +
                    std::to_string(min_bytes) + "-byte header");
  }
  map_ = bytes ? ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw DataError(file + ": cannot map " + what + ": " + std::strerror(errno));
  }
  map_bytes_ = bytes;
  watch_ = watch_mapping(map_, bytes);
}

void TokenShard::unmap() {
  unwatch_mapping(watch_);
  watch_ = -1;
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
}

void TokenShard::check_unchanged() const {
  if (mapping_lost(watch_))
    throw DataError(path_ + ": the file shrank while the run read it (it was rewritten or truncated in place), so "
                    "the tokens read past its new end are gone; never change a shard under a running job: write "
                    "new data under new names (`trainer data prepare --output` a new directory) and resume from "
                    "the newest checkpoint");
}

void TokenShard::open_llmc() {
  const std::string& path = path_;
  map(path, kShardHeaderBytes, "token shard");
  const size_t bytes = map_bytes_;
  const auto* hdr = static_cast<const int32_t*>(map_);
  if (hdr[0] != kShardMagic && hdr[0] != kShardMagicLlama3)
    throw DataError(path + ": not a token shard: magic at byte offset 0 is " + std::to_string(hdr[0]) + ", expected " +
                    std::to_string(kShardMagic) + " or " + std::to_string(kShardMagicLlama3) +
                    " (llm.c), and there is no Megatron .idx beside it (make shards with `trainer data prepare`)");
  const bool v_ok = hdr[0] == kShardMagic ? (hdr[1] == 1 || hdr[1] == 2) : hdr[1] == 7;
  if (!v_ok)
    throw DataError(path + ": unsupported token shard version " + std::to_string(hdr[1]) +
                    " at byte offset 4 (supported: magic 20240520 with 1 = uint16 or 2 = uint32 tokens, "
                    "magic 20240801 with 7 = uint32 tokens)");
  if (hdr[2] < 0) throw DataError(path + ": negative token count in header at byte offset 8");
  width_ = hdr[1] == 1 ? 2 : 4;
  version_ = hdr[1];
  count_ = (size_t)hdr[2];
  const size_t want = kShardHeaderBytes + count_ * width_;
  if (bytes < want)
    throw DataError(path + ": truncated token shard: header promises " + std::to_string(count_) + " tokens (" +
                    std::to_string(want) + " bytes) but the file has " + std::to_string(bytes) +
                    " bytes; data ends at token " + std::to_string((bytes - kShardHeaderBytes) / width_));
  if (bytes > want)
    throw DataError(path + ": the header at byte offset 8 says " + std::to_string(count_) + " tokens (" +
                    std::to_string(want) + " bytes) but the file has " + std::to_string(bytes) +
                    " bytes: the count is wrong or the file was appended to; rewrite the shard");
  data_ = static_cast<const unsigned char*>(map_) + kShardHeaderBytes;
}

// The .idx is read and checked whole, then let go; the .bin stays mapped.
void TokenShard::open_megatron(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx";
  constexpr size_t kHead = 9 + 8 + 1 + 8 + 8;
  map(idx_path, kHead, "Megatron index");
  const auto* p = static_cast<const unsigned char*>(map_);
  const size_t bytes = map_bytes_;
  auto bad = [&](size_t off, const std::string& why) {
    return DataError(idx_path + ": " + why + " (byte offset " + std::to_string(off) + ")");
  };
  if (std::memcmp(p, kMegatronMagicBytes, 9) != 0) throw bad(0, "not a Megatron index: wrong magic (want MMIDIDX)");
  if (const uint64_t v = read_at<uint64_t>(p, 9); v != 1) throw bad(9, "unsupported index version " + std::to_string(v));
  const uint8_t code = p[17];
  switch (code) {
    case 1: width_ = 1; break;
    case 2: width_ = 1, signed_ = true; break;
    case 3: width_ = 2, signed_ = true; break;
    case 4: case 5: width_ = code == 4 ? 4 : 8, signed_ = true; break;  // int32, int64 (Megatron has no uint32)
    case 8: width_ = 2; break;
    default:
      throw bad(17, "unsupported dtype code " + std::to_string(code) +
                        " (token ids must be integers: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16)");
  }
  const uint64_t S = read_at<uint64_t>(p, 18), D = read_at<uint64_t>(p, 26);
  // In 128 bits: counts read from a hostile file must not wrap the need.
  const unsigned __int128 want = (unsigned __int128)kHead + (unsigned __int128)S * 12 + (unsigned __int128)D * 8;
  if (want > bytes) {
    std::string need;
    for (unsigned __int128 v = want; v > 0; v /= 10) need.insert(need.begin(), char('0' + (int)(v % 10)));
    throw bad(bytes, "truncated index: " + std::to_string(S) + " sequences and " + std::to_string(D) +
                         " document entries need " + need + " bytes, the file has " + std::to_string(bytes));
  }
  const size_t len_at = kHead, ptr_at = len_at + S * 4, doc_at = ptr_at + S * 8;
  const std::string bin_path = prefix + ".bin";
  struct stat st {};
  if (::stat(bin_path.c_str(), &st) != 0) throw DataError(bin_path + ": cannot open: " + std::strerror(errno));
  const uint64_t bin_bytes = (uint64_t)st.st_size;
  uint64_t tokens = 0, expect_ptr = 0;
  for (uint64_t i = 0; i < S; i++) {
    const int32_t len = read_at<int32_t>(p, len_at + i * 4);
    const int64_t ptr = read_at<int64_t>(p, ptr_at + i * 8);
    if (len < 0) throw bad(len_at + i * 4, "negative length of sequence " + std::to_string(i));
    if ((uint64_t)ptr != expect_ptr)
      throw bad(ptr_at + i * 8, "sequence " + std::to_string(i) + " starts at byte " + std::to_string(ptr) +
                                    " of the .bin, expected " + std::to_string(expect_ptr) +
                                    " (sequences are stored back to back)");
    expect_ptr += (uint64_t)len * width_;
    if (expect_ptr > bin_bytes)
      throw bad(len_at + i * 4, "sequence " + std::to_string(i) + " ends at byte " + std::to_string(expect_ptr) +
                                    " of " + bin_path + ", past its end (" + std::to_string(bin_bytes) + " bytes)");
    tokens += (uint64_t)len;
  }
  if (D == 0 || read_at<int64_t>(p, doc_at) != 0 || read_at<uint64_t>(p, doc_at + (D - 1) * 8) != S)
    throw bad(doc_at, "the document index must start at 0 and end at the sequence count " + std::to_string(S));
  unmap();
  path_ = bin_path;
  megatron_ = true;
  header_bytes_ = 0;
  map(bin_path, 0, "Megatron data");
  data_ = static_cast<const unsigned char*>(map_);
  count_ = tokens;
  documents_ = D - 1;
}

std::string TokenShard::describe() const {
  const std::string type = std::string(signed_ ? "int" : "uint") + std::to_string(width_ * 8);
  return megatron_ ? "megatron, " + type : "llm.c v" + std::to_string(version_) + ", " + type;
}

uint32_t TokenShard::max_token(size_t* where) const {
  // A plain max over the typed array (vectorised: ~GB/s), then one pass for
  // the place of the largest.
  auto top_of = [&](const auto* p) {
    uint32_t best = 0;
    for (size_t i = 0; i < count_; i++) best = std::max<uint32_t>(best, p[i]);
    return best;
  };
  uint32_t best = 0;
  if (width_ == 2 && !signed_) best = top_of(reinterpret_cast<const uint16_t*>(data_));
  else if (width_ == 4) best = top_of(reinterpret_cast<const uint32_t*>(data_));
  else
    for (size_t i = 0; i < count_; i++) best = std::max(best, token(i));
  if (where)
    for (size_t i = 0; i < count_; i++)
      if (token(i) == best) {
        *where = i;
        break;
      }
  return best;
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), map_bytes_(o.map_bytes_), data_(o.data_), count_(o.count_),
      header_bytes_(o.header_bytes_), documents_(o.documents_), width_(o.width_), version_(o.version_),
      signed_(o.signed_), megatron_(o.megatron_), watch_(o.watch_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
  o.watch_ = -1;
}

TokenShard::~TokenShard() { unmap(); }

void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
  const std::string base = path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0 ? path.substr(0, path.size() - 4) : "";
  if (base.empty()) throw DataError(path + ": a token shard's name ends in .bin");
  const uint32_t top = tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
  write_shard(ShardFormat::Llmc, base, tokens.data(), tokens.size(), {}, top + 1);
  if (std::rename((path + ".new").c_str(), path.c_str()) != 0)
    throw DataError(path + ": cannot rename into place: " + std::strerror(errno));
}

}  // namespace trainer
