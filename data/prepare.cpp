#include "data/prepare.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "data/token_shard.h"
#include "runtime/errors.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {
std::vector<fs::path> collect_files(const std::vector<std::string>& inputs) {
  std::vector<fs::path> files;
  std::set<fs::path> seen;  // canonical paths, so GPL -> GPL-3 is read once
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    const fs::path canon = fs::canonical(p, ec);
    if (!ec && fs::is_regular_file(canon) && seen.insert(canon).second) files.push_back(p);
  };
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (!fs::exists(in, ec)) throw DataError(in + ": no such file or directory");
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> sub;
      for (const auto& e : fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink))
        sub.push_back(e.path());
      std::sort(sub.begin(), sub.end());
      for (const auto& p : sub) add(p);
    } else {
      add(in);
    }
  }
  if (files.empty()) throw DataError("no readable files among the --input paths");
  return files;
}
}  // namespace

PrepareResult prepare_bytes(const PrepareConfig& cfg) {
  if (cfg.val_fraction < 0 || cfg.val_fraction >= 1)
    throw RecipeError("--val-fraction must be in [0, 1), got " + std::to_string(cfg.val_fraction));
  PrepareResult res;
  std::vector<uint32_t> tokens;
  for (const fs::path& p : collect_files(cfg.inputs)) {
    std::ifstream f(p, std::ios::binary);
    if (!f) throw DataError(p.string() + ": cannot read");
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (unsigned char c : bytes) tokens.push_back(c);
    tokens.push_back('\n');  // keep documents apart
    res.files++;
  }
  const size_t n_val = (size_t)(tokens.size() * cfg.val_fraction);
  const size_t n_train = tokens.size() - n_val;
  std::error_code ec;
  fs::create_directories(cfg.output_dir, ec);
  if (ec) throw DataError(cfg.output_dir + ": cannot create directory: " + ec.message());
  char name[64];
  for (size_t off = 0, k = 0; off < n_train; off += cfg.shard_tokens, k++) {
    const size_t end = std::min(n_train, off + cfg.shard_tokens);
    std::snprintf(name, sizeof(name), "train_%06zu.bin", k);
    const std::string path = (fs::path(cfg.output_dir) / name).string();
    write_token_shard(path, std::vector<uint32_t>(tokens.begin() + off, tokens.begin() + end));
    res.train_shards.push_back(path);
  }
  if (n_val > 0) {
    const std::string path = (fs::path(cfg.output_dir) / "val_000000.bin").string();
    write_token_shard(path, std::vector<uint32_t>(tokens.begin() + n_train, tokens.end()));
    res.val_shards.push_back(path);
  }
  res.train_tokens = n_train;
  res.val_tokens = n_val;
  return res;
}

}  // namespace trainer
