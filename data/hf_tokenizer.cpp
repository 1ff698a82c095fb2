#include "data/hf_tokenizer.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"
#include "runtime/errors.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {

// GPT-2's printable stand-in for each byte (its encoder.py bytes_to_unicode).
std::vector<std::string> byte_alphabet() {
  std::vector<int> code(256, -1);
  for (int b = 0; b < 256; b++)
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) code[b] = b;
  for (int b = 0, n = 0; b < 256; b++)
    if (code[b] < 0) code[b] = 256 + n++;
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; b++) {
    const int c = code[b];  // < 0x800: one or two UTF-8 bytes
    out[b] = c < 0x80 ? std::string(1, (char)c) : std::string{(char)(0xC0 | (c >> 6)), (char)(0x80 | (c & 0x3F))};
  }
  return out;
}

std::string visible(std::string_view bytes, const std::vector<std::string>& alpha) {
  std::string s;
  for (unsigned char b : bytes) s += alpha[b];
  return s;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f.flush()) throw CheckpointError(path + ": cannot write");
}

std::vector<std::string> gpt2_files(const BpeTokenizer& t, const std::string& dir, int max_length) {
  const std::vector<std::string> alpha = byte_alphabet();
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::string merges = "#version: 0.2\n";
  std::vector<uint32_t> parts;
  const auto ranks = t.ranks();
  std::vector<size_t> size_of(ranks.empty() ? 0 : ranks.back().first + 1, 0);
  for (const auto& [r, bytes] : ranks) size_of[r] = bytes.size();
  for (const auto& [r, bytes] : ranks) {
    vocab[visible(bytes, alpha)] = r;
    if (bytes.size() < 2) continue;
    parts.clear();
    t.merge(bytes, parts, r);
    if (parts.size() != 2) throw CheckpointError("tokenizer gpt2: rank " + std::to_string(r) + " is no merge of two lower ranks");
    const std::string_view left = bytes.substr(0, size_of[parts[0]]);
    merges += visible(left, alpha) + " " + visible(bytes.substr(left.size()), alpha) + "\n";
  }
  vocab["<|endoftext|>"] = 50256;
  write_text(dir + "/vocab.json", vocab.dump());
  write_text(dir + "/merges.txt", merges);
  const nlohmann::ordered_json cfg = {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", max_length},
                                      {"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"},
                                      {"unk_token", "<|endoftext|>"}, {"add_prefix_space", false}};
  write_text(dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
  return {"vocab.json", "merges.txt", "tokenizer_config.json"};
}

}  // namespace

std::vector<std::string> write_hf_tokenizer(const std::string& spec, const std::string& dir, int max_length,
                                            std::string* why) {
  const size_t colon = spec.find(':');
  const std::string family = spec.substr(0, colon), file = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (family == "gpt2") {
    const auto tok = make_tokenizer(spec);
    return gpt2_files(static_cast<const BpeTokenizer&>(*tok), dir, max_length);
  }
  const std::string model = family == "sentencepiece" ? file : (spec.size() > 6 && spec.substr(spec.size() - 6) == ".model") ? spec : "";
  if (!model.empty()) {
    std::error_code ec;
    fs::copy_file(model, dir + "/tokenizer.model", ec);
    if (ec) throw CheckpointError(model + ": cannot copy the SentencePiece model: " + ec.message());
    const nlohmann::ordered_json cfg = {{"tokenizer_class", "LlamaTokenizer"}, {"model_max_length", max_length},
                                        {"add_bos_token", true}, {"add_eos_token", false}};
    write_text(dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
    return {"tokenizer.model", "tokenizer_config.json"};
  }
  *why = "tokenizer \"" + spec + "\": no Hugging Face tokenizer files are written for it (gpt2 and sentencepiece only)";
  return {};
}

}  // namespace trainer
