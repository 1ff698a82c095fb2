#include "data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/prepare.h"

#include "runtime/errors.h"
#include "runtime/regular_file.h"

namespace fs = std::filesystem;

namespace trainer {

std::vector<std::string> expand_paths(const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  // A Megatron dataset stands for its prefix, however it is named (x, x.bin,
  // x.idx), so a glob that matches both of its files reads it once.
  auto add = [&](const std::string& h) {
    const std::string prefix = megatron_prefix(h);
    const std::string& name = prefix.empty() ? h : prefix;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  for (const std::string& p : patterns) {
    glob_t g{};
    const int rc = ::glob(p.c_str(), 0, nullptr, &g);
    std::vector<std::string> hits(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
    globfree(&g);
    if (hits.empty() && !megatron_prefix(p).empty()) hits.push_back(p);
    if (hits.empty()) throw DataError(p + ": no such file (or the pattern matches nothing)");
    std::sort(hits.begin(), hits.end());
    for (auto& h : hits) add(h);
  }
  return out;
}

std::optional<DataInfo> read_data_info(const std::string& data_file) {
  const fs::path info = fs::path(data_file).parent_path() / kDataInfoFile;
  if (const std::string why = not_regular_file(info.string()); !why.empty())
    throw DataError(info.string() + ": " + why);
  std::ifstream f(info);
  if (!f) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    return DataInfo{j.value("tokenizer", std::string("?")), j.value("tokenizer_spec", std::string()),
                    j.value("vocab_size", (int64_t)0)};
  } catch (const nlohmann::json::exception& e) {
    throw DataError(info.string() + ": not valid JSON (" + e.what() + "); rewrite it with `trainer data prepare`");
  }
}

std::string recorded_tokenizer(const std::string& pattern) {
  const std::optional<DataInfo> info = read_data_info(expand_paths({pattern}).front());
  return info ? info->spec : "";
}

namespace {
// The tokenizer's vocabulary (data_info.json beside a file) must fit the
// model's. Files without one are checked by their token ids alone.
void check_data_info(const std::string& file, int vocab_size) {
  const std::optional<DataInfo> info = read_data_info(file);
  if (!info || info->vocab_size <= vocab_size) return;
  const int64_t need = info->vocab_size, padded = (need + 127) / 128 * 128;
  const std::string info_path = (fs::path(file).parent_path() / kDataInfoFile).string();
  throw RecipeError(file + " was made by tokenizer " + info->tokenizer + " with " +
                    std::to_string(need) + " ids (" + info_path + ") but model.vocab_size is " +
                    std::to_string(vocab_size) + ": set model.vocab_size >= " + std::to_string(need) + ", e.g. " +
                    std::to_string(padded) + " (a multiple of 128: the extra rows are never a target, and it " +
                    "divides by the usual parallel.tp values)");
}
}  // namespace

TokenDataset::TokenDataset(const std::vector<std::string>& files, int seq_len, int vocab_size, bool check_vocab)
    : T_(seq_len), V_(vocab_size) {
  for (const std::string& f : files) {
    check_data_info(f, vocab_size);
    TokenShard s(f);
    size_t at = 0;
    if (const uint32_t top = check_vocab ? s.max_token() : 0; top >= (uint32_t)vocab_size && s.max_token(&at))
      throw DataError(f + ": token id " + std::to_string(top) + " at token " + std::to_string(at) + " (byte offset " +
                      std::to_string(s.byte_offset(at)) + ") is >= vocab_size " + std::to_string(vocab_size) +
                      ": the shard was made for a larger vocabulary (model.vocab_size) or is corrupt");
    const size_t n = s.size() > (size_t)T_ ? (s.size() - 1) / T_ : 0;
    first_.push_back(total_);
    total_ += n;
    shards_.push_back(std::move(s));
  }
  if (total_ == 0) {
    std::string names;
    for (const auto& f : files) names += (names.empty() ? "" : ", ") + f;
    throw DataError(names + ": fewer than seq_len+1 = " + std::to_string(T_ + 1) +
                    " tokens in every shard: no sample fits");
  }
}

void TokenDataset::read_sample(size_t k, int32_t* inputs, int32_t* targets) const {
  const size_t si = std::upper_bound(first_.begin(), first_.end(), k) - first_.begin() - 1;
  const TokenShard& s = shards_[si];
  const size_t start = (k - first_[si]) * T_;
  for (int t = 0; t <= T_; t++) {
    const uint32_t tok = s.token(start + t);
    if (tok >= (uint32_t)V_)
      throw DataError(s.path() + ": token id " + std::to_string(tok) + " at token " +
                      std::to_string(start + t) + " (byte offset " +
                      std::to_string(s.byte_offset(start + t)) + ") is >= vocab_size " +
                      std::to_string(V_));
    if (t < T_) inputs[t] = (int32_t)tok;
    if (t > 0) targets[t - 1] = (int32_t)tok;
  }
  s.check_unchanged();
}

}  // namespace trainer
