#include "ckpt/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/errors.h"
#include "runtime/regular_file.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {

const char* st_dtype(DType d) { return d == DType::BF16 ? "BF16" : "F32"; }

void write_file(const std::string& path, const std::string& header, const std::vector<const SafeTensor*>& ts) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw CheckpointError(tmp + ": cannot create: " + std::strerror(errno));
  const uint64_t n = header.size();
  bool ok = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(header.data(), 1, n, f) == n;
  for (const SafeTensor* t : ts) ok = ok && std::fwrite(t->bytes.data(), 1, t->bytes.size(), f) == t->bytes.size();
  ok = std::fflush(f) == 0 && ok && ::fsync(fileno(f)) == 0;
  const int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw CheckpointError(path + ": cannot write: " + std::strerror(ok ? errno : err));
  }
}

std::string header_of(const std::vector<const SafeTensor*>& ts, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h;
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const SafeTensor* t : ts) {
    h[t->name] = {{"dtype", st_dtype(t->dtype)}, {"shape", t->shape}, {"data_offsets", {at, at + t->bytes.size()}}};
    at += t->bytes.size();
  }
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  return s;
}

}  // namespace

std::vector<std::string> write_safetensors(const std::string& dir, const std::vector<SafeTensor>& tensors,
                                           size_t max_shard_bytes,
                                           const std::map<std::string, std::string>& metadata) {
  std::vector<std::vector<const SafeTensor*>> shards(1);
  size_t in_shard = 0, total = 0;
  for (const SafeTensor& t : tensors) {
    if (in_shard > 0 && in_shard + t.bytes.size() > max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(&t);
    in_shard += t.bytes.size();
    total += t.bytes.size();
  }
  std::vector<std::string> names;
  if (shards.size() == 1) {
    write_file((fs::path(dir) / "model.safetensors").string(), header_of(shards[0], metadata), shards[0]);
    return {"model.safetensors"};
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", nlohmann::ordered_json::object()}};
  for (size_t k = 0; k < shards.size(); k++) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    write_file((fs::path(dir) / name).string(), header_of(shards[k], metadata), shards[k]);
    names.push_back(name);
    for (const SafeTensor* t : shards[k]) index["weight_map"][t->name] = name;
  }
  const std::string idx = (fs::path(dir) / "model.safetensors.index.json").string();
  std::ofstream(idx + ".tmp") << index.dump(2) << "\n";
  if (std::rename((idx + ".tmp").c_str(), idx.c_str()) != 0)
    throw CheckpointError(idx + ": cannot write: " + std::strerror(errno));
  names.push_back("model.safetensors.index.json");
  return names;
}

namespace {
// Reading is hostile-input safe: every offset and shape is checked with
// arithmetic that cannot wrap, every read's count is checked, and what the
// format forbids (overlapping tensors, holes in the data, fractional or
// negative numbers) is refused with the file and tensor named (exit 4).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

uint64_t checked_count(const nlohmann::json& shape, const std::string& where) {
  if (!shape.is_array()) throw CheckpointError(where + ": shape is not a list of integers: " + shape.dump());
  uint64_t count = 1;
  for (const nlohmann::json& d : shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t)INT32_MAX)
      throw CheckpointError(where + ": shape " + shape.dump() + " has a dimension that is not an integer in [0, 2^31)");
    if (__builtin_mul_overflow(count, d.get<uint64_t>(), &count))
      throw CheckpointError(where + ": shape " + shape.dump() + " has more elements than 2^64");
  }
  return count;
}

void read_file(const std::string& path, std::map<std::string, LoadedTensor>& out) {
  if (const std::string why = not_regular_file(path); !why.empty()) throw CheckpointError(path + ": " + why);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw CheckpointError(path + ": cannot read");
  f.seekg(0, std::ios::end);
  const uint64_t size = (uint64_t)f.tellg();
  f.seekg(0);
  uint64_t n = 0;
  if (size < 8 || !f.read(reinterpret_cast<char*>(&n), 8) || n > size - 8 || n > kMaxHeaderBytes)
    throw CheckpointError(path + ": not a safetensors file (the header length at byte 0 exceeds the file or 100 MB)");
  std::string text(n, '\0');
  if (!f.read(text.data(), (std::streamsize)n)) throw CheckpointError(path + ": cannot read its header");
  const nlohmann::json h = nlohmann::json::parse(text, nullptr, false);
  if (h.is_discarded() || !h.is_object())
    throw CheckpointError(path + ": the safetensors header (bytes 8.." + std::to_string(8 + n) + ") is not a JSON object");
  const uint64_t data_at = 8 + n, data_bytes = size - data_at;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__") continue;
    const std::string where = path + ": tensor " + name;
    if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
      throw CheckpointError(where + ": expected an object with dtype, shape and data_offsets, got " + t.dump());
    const std::string dt = t["dtype"].is_string() ? t["dtype"].get<std::string>() : t["dtype"].dump();
    if (dt != "F32" && dt != "BF16")
      throw CheckpointError(where + " has dtype \"" + dt + "\" (F32 or BF16 are read)");
    const uint64_t width = dt == "F32" ? 4 : 2, count = checked_count(t["shape"], where);
    const nlohmann::json& o = t["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
      throw CheckpointError(where + ": data_offsets must be two non-negative integers, got " + o.dump());
    const uint64_t b = o[0].get<uint64_t>(), e = o[1].get<uint64_t>();
    uint64_t bytes = 0;
    if (e < b || e > data_bytes || __builtin_mul_overflow(count, width, &bytes) || e - b != bytes)
      throw CheckpointError(where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                            "] do not fit its shape (" + std::to_string(count) + " x " + std::to_string(width) +
                            " bytes) or the file's " + std::to_string(data_bytes) + " data bytes");
    if (out.count(name)) throw CheckpointError(where + ": a second copy of this tensor (names must be unique)");
    spans.emplace_back(b, e);
    LoadedTensor& lt = out[name];
    for (const nlohmann::json& d : t["shape"]) lt.shape.push_back((int)d.get<uint64_t>());
    std::vector<uint8_t> raw(bytes);
    f.seekg((std::streamoff)(data_at + b));
    if (!f.read(reinterpret_cast<char*>(raw.data()), (std::streamsize)raw.size()) || (uint64_t)f.gcount() != bytes)
      throw CheckpointError(where + ": cannot read its " + std::to_string(bytes) + " bytes");
    lt.data.resize(count);
    if (width == 4) std::memcpy(lt.data.data(), raw.data(), raw.size());
    else
      for (size_t i = 0; i < count; i++) {
        bf16 v;
        std::memcpy(&v, raw.data() + 2 * i, 2);
        lt.data[i] = from_bf16(v);
      }
  }
  // The tensors tile the data: sorted, each starts where the last ended.
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [b, e] : spans) {
    if (b != at)
      throw CheckpointError(path + ": tensors " + (b < at ? "overlap" : "leave a hole") + " at data byte " +
                            std::to_string(std::min(b, at)) + " (the format requires them to tile the data)");
    at = e;
  }
}

// A weight_map's file: a plain name inside the model directory.
std::string shard_name(const nlohmann::json& file, const std::string& index, const std::string& tensor) {
  const std::string f = file.is_string() ? file.get<std::string>() : "";
  if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos || f.find('\0') != std::string::npos)
    throw CheckpointError(index + ": weight_map[\"" + tensor + "\"] = " + file.dump() +
                          ": expected the name of a file in the model directory (no path)");
  return f;
}
}  // namespace

std::map<std::string, LoadedTensor> read_safetensors_dir(const std::string& dir) {
  std::map<std::string, LoadedTensor> out;
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    read_file(single.string(), out);
    return out;
  }
  if (!fs::exists(index))
    throw CheckpointError(dir + ": no model.safetensors or model.safetensors.index.json (a PyTorch .bin model? "
                          "save it with save_pretrained(DIR, safe_serialization=True))");
  if (const std::string why = not_regular_file(index.string()); !why.empty())
    throw CheckpointError(index.string() + ": " + why);
  std::ifstream f(index);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw CheckpointError(index.string() + ": not a safetensors index (no weight_map object)");
  std::set<std::string> files;
  for (const auto& [name, file] : j["weight_map"].items()) files.insert(shard_name(file, index.string(), name));
  for (const std::string& file : files) read_file((fs::path(dir) / file).string(), out);
  return out;
}

}  // namespace trainer
