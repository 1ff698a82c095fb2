#include "data/shard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "data/token_shard.h"
#include "runtime/errors.h"

namespace trainer {

namespace {

class OutFile {
 public:
  explicit OutFile(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    if (!f_) fail("cannot create");
  }
  ~OutFile() {
    if (f_) std::fclose(f_);
  }
  void put(const void* p, size_t bytes) {
    if (bytes && std::fwrite(p, 1, bytes, f_) != bytes) fail("write failed");
  }
  template <class T>
  void put_tokens(const uint32_t* t, size_t n) {
    T block[4096];
    for (size_t i = 0; i < n; i += 4096) {
      const size_t k = std::min<size_t>(4096, n - i);
      for (size_t j = 0; j < k; j++) block[j] = (T)t[i + j];
      put(block, k * sizeof(T));
    }
  }
  void finish() {
    const bool ok = std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0;
    const bool closed = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok || !closed) fail("write failed");
  }

 private:
  [[noreturn]] void fail(const char* what) {
    const std::string why = std::strerror(errno);
    if (f_) std::fclose(f_);
    f_ = nullptr;
    std::remove(path_.c_str());
    throw DataError(path_ + ": " + what + ": " + why);
  }
  std::string path_;
  FILE* f_;
};

std::string write_llmc(const std::string& base, const uint32_t* t, size_t n, uint32_t vocab) {
  const bool narrow = vocab <= 65536;
  if (n > (size_t)INT32_MAX) throw DataError(base + ": more than 2^31 tokens in one llm.c shard; lower the shard size");
  int32_t hdr[kShardHeaderInts] = {0};
  hdr[0] = narrow ? kShardMagic : kShardMagicLlama3;
  hdr[1] = narrow ? 1 : 7;
  hdr[2] = (int32_t)n;
  const std::string path = base + ".bin";
  OutFile f(path + ".new");
  f.put(hdr, sizeof(hdr));
  if (narrow) f.put_tokens<uint16_t>(t, n);
  else f.put_tokens<uint32_t>(t, n);
  f.finish();
  return path;
}

std::vector<std::string> write_megatron(const std::string& base, const uint32_t* t, size_t n,
                                        const std::vector<uint64_t>& docs, uint32_t vocab) {
  const bool narrow = vocab < 65500;  // as Megatron's preprocess_data.py decides
  const size_t width = narrow ? 2 : 4;
  OutFile bin(base + ".bin.new");
  if (narrow) bin.put_tokens<uint16_t>(t, n);
  else bin.put_tokens<int32_t>(t, n);
  bin.finish();
  OutFile idx(base + ".idx.new");
  const uint64_t version = 1, S = docs.size(), D = S + 1;
  const uint8_t code = narrow ? kMgU16 : kMgI32;
  idx.put(kMegatronMagicBytes, 9);
  idx.put(&version, 8);
  idx.put(&code, 1);
  idx.put(&S, 8);
  idx.put(&D, 8);
  for (uint64_t len : docs) {
    const int32_t l = (int32_t)len;
    idx.put(&l, 4);
  }
  int64_t offset = 0;
  for (uint64_t len : docs) {
    idx.put(&offset, 8);
    offset += (int64_t)(len * width);
  }
  for (int64_t d = 0; d <= (int64_t)S; d++) idx.put(&d, 8);
  idx.finish();
  return {base + ".bin", base + ".idx"};
}

}  // namespace

std::vector<std::string> write_shard(ShardFormat f, const std::string& base, const uint32_t* tokens, size_t n,
                                     const std::vector<uint64_t>& doc_lengths, uint32_t vocab_size) {
  if (f == ShardFormat::Llmc) return {write_llmc(base, tokens, n, vocab_size)};
  return write_megatron(base, tokens, n, doc_lengths, vocab_size);
}

}  // namespace trainer
