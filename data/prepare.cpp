#include "data/prepare.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
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

// Shards of an earlier `data prepare` in dir (and their temporary files).
std::vector<fs::path> existing_shards(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const bool named = n.rfind("train_", 0) == 0 || n.rfind("val_", 0) == 0;
    auto ends = [&](const std::string& x) { return n.size() > x.size() && n.substr(n.size() - x.size()) == x; };
    if (named && (ends(".bin") || ends(".bin.tmp") || ends(".bin.new") || ends(".bin.new.tmp")))
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

PrepareResult prepare_bytes(const PrepareConfig& cfg) {
  if (!(cfg.val_fraction >= 0 && cfg.val_fraction < 1))
    throw RecipeError("--val-fraction must be a number in [0, 1), got " + std::to_string(cfg.val_fraction));
  PrepareResult res;
  const std::vector<fs::path> old = existing_shards(cfg.output_dir);
  if (!old.empty() && !cfg.overwrite)
    throw DataError(cfg.output_dir + " already holds token shards (" + old.front().filename().string() +
                    (old.size() > 1 ? " and " + std::to_string(old.size() - 1) + " more" : std::string()) +
                    "); writing a new set there would mix with them. Choose another --output, or add "
                    "--overwrite to remove the old set first.");
  std::vector<uint32_t> tokens;
  for (const fs::path& p : collect_files(cfg.inputs)) {
    std::ifstream f(p, std::ios::binary);
    if (!f) throw DataError(p.string() + ": cannot read");
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (bytes.empty()) {
      res.empty_files.push_back(p.string());
      continue;
    }
    for (unsigned char c : bytes) tokens.push_back(c);
    tokens.push_back('\n');  // keep documents apart
    res.files++;
  }
  if (tokens.empty())
    throw DataError("the --input files are all empty (0 bytes): there is no text to make tokens from");
  const size_t n_val = (size_t)(tokens.size() * cfg.val_fraction);
  const size_t n_train = tokens.size() - n_val;
  std::error_code ec;
  fs::create_directories(cfg.output_dir, ec);
  if (ec) throw DataError(cfg.output_dir + ": cannot create directory: " + ec.message());
  // The new set goes to temporary names first; only when all of it is
  // written does the old set (with --overwrite) make way for it.
  std::vector<std::string> written;
  auto write = [&](const std::string& name, size_t from, size_t to, std::vector<std::string>& list) {
    const std::string path = (fs::path(cfg.output_dir) / name).string();
    write_token_shard(path + ".new", std::vector<uint32_t>(tokens.begin() + from, tokens.begin() + to));
    written.push_back(path);
    list.push_back(path);
  };
  try {
    char name[64];
    for (size_t off = 0, k = 0; off < n_train; off += cfg.shard_tokens, k++) {
      std::snprintf(name, sizeof(name), "train_%06zu.bin", k);
      write(name, off, std::min(n_train, off + cfg.shard_tokens), res.train_shards);
    }
    if (n_val > 0) write("val_000000.bin", n_train, tokens.size(), res.val_shards);
  } catch (const DataError&) {
    for (const std::string& w : written) fs::remove(w + ".new", ec);
    throw;
  }
  for (const fs::path& p : old) {  // --overwrite: the old set goes as a whole
    if (!fs::remove(p, ec) || ec) throw DataError(p.string() + ": cannot remove: " + ec.message());
    res.removed_shards++;
  }
  for (const std::string& w : written)
    if (std::rename((w + ".new").c_str(), w.c_str()) != 0)
      throw DataError(w + ": cannot rename into place: " + std::strerror(errno));
  res.train_tokens = n_train;
  res.val_tokens = n_val;
  return res;
}

}  // namespace trainer
