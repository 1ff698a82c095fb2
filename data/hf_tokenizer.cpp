#include "data/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
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

// A byte-level BPE as Hugging Face holds it: each rank's bytes in the byte
// alphabet -> rank, and the merges in rank order ("left right"). tiktoken
// looks a whole piece up before merging, so a vocabulary may hold tokens no
// merge of two lower ranks makes (678 of Llama-3's multilingual additions);
// they get no merge line (`strict`: that is an error).
struct ByteLevelBpe {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::vector<std::string> merges;
  size_t unmerged = 0;
};

ByteLevelBpe byte_level_bpe(const BpeTokenizer& t, bool strict) {
  const std::vector<std::string> alpha = byte_alphabet();
  ByteLevelBpe out;
  std::vector<uint32_t> parts;
  const auto ranks = t.ranks();
  std::vector<size_t> size_of(ranks.empty() ? 0 : ranks.back().first + 1, 0);
  for (const auto& [r, bytes] : ranks) size_of[r] = bytes.size();
  for (const auto& [r, bytes] : ranks) {
    out.vocab[visible(bytes, alpha)] = r;
    if (bytes.size() < 2) continue;
    parts.clear();
    t.merge(bytes, parts, r);
    if (parts.size() != 2 && strict)
      throw CheckpointError("tokenizer " + t.name() + ": rank " + std::to_string(r) + " is no merge of two lower ranks");
    if (parts.size() != 2) {
      out.unmerged++;
      continue;
    }
    const std::string_view left = bytes.substr(0, size_of[parts[0]]);
    out.merges.push_back(visible(left, alpha) + " " + visible(bytes.substr(left.size()), alpha));
  }
  return out;
}

// A special token as tokenizer.json lists it among its added tokens.
nlohmann::ordered_json added_token(const std::string& text, uint32_t id) {
  return {{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// tokenizer.json's post-processor that puts `bos` (id) before each text,
// as the run's documents had it (a pair: before each of the two).
nlohmann::ordered_json bos_before_each_text(const std::string& bos, uint32_t id) {
  using oj = nlohmann::ordered_json;
  const auto piece = [&](int type) { return oj{{"SpecialToken", {{"id", bos}, {"type_id", type}}}}; };
  const auto text = [](const char* which, int type) { return oj{{"Sequence", {{"id", which}, {"type_id", type}}}}; };
  return {{"type", "TemplateProcessing"},
          {"single", {piece(0), text("A", 0)}},
          {"pair", {piece(0), text("A", 0), piece(1), text("B", 1)}},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", {id}}, {"tokens", {bos}}}}}}};
}

// The model's inputs, named in every tokenizer_config.json: without it a
// tokenizer also returns token_type_ids, which generate() refuses.
const nlohmann::ordered_json kModelInputNames = {"input_ids", "attention_mask"};

// GPT-2: vocab.json + merges.txt for the slow GPT2Tokenizer, and the same
// as tokenizer.json (byte-level BPE with GPT-2's own regex, as OpenAI's
// Hugging Face release has it) for the fast one and llama.cpp's converter.
std::vector<std::string> gpt2_files(const BpeTokenizer& t, const std::string& dir, int max_length) {
  using oj = nlohmann::ordered_json;
  ByteLevelBpe bpe = byte_level_bpe(t, true);
  oj& vocab = bpe.vocab;
  std::string merges = "#version: 0.2\n";
  for (const std::string& m : bpe.merges) merges += m + "\n";
  const std::string eot = "<|endoftext|>";
  vocab[eot] = 50256;
  write_text(dir + "/vocab.json", vocab.dump());
  write_text(dir + "/merges.txt", merges);
  const oj byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                         {"use_regex", true}};
  const oj tok = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
      {"added_tokens", oj::array({added_token(eot, 50256)})}, {"normalizer", nullptr},
      {"pre_tokenizer", byte_level}, {"post_processor", byte_level}, {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", bpe.merges}}}};
  write_text(dir + "/tokenizer.json", tok.dump() + "\n");
  const oj cfg = {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", max_length},
                  {"bos_token", eot}, {"eos_token", eot}, {"unk_token", eot}, {"add_prefix_space", false},
                  {"model_input_names", kModelInputNames}};
  write_text(dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
  return {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"};
}

// Llama-3: one tokenizer.json for PreTrainedTokenizerFast (as Meta's
// Hugging Face release has it): its pattern split, then byte-level BPE
// without a regex of its own, the special tokens as added tokens, and
// <|begin_of_text|> put before each text as the run's documents had it.
// "ignore_merges" (tokenizers >= 0.19) looks whole pieces up first, as
// tiktoken does, which the tokens without a merge line need; older
// tokenizers ignore the field and split those rare pieces differently.
std::vector<std::string> llama3_files(const BpeTokenizer& t, const std::string& dir, int max_length,
                                      std::string* note) {
  using oj = nlohmann::ordered_json;
  ByteLevelBpe bpe = byte_level_bpe(t, false);
  if (bpe.unmerged)
    *note = std::to_string(bpe.unmerged) + " Llama-3 tokens are no merge of two lower ranks: tokenizers >= 0.19 "
            "(ignore_merges) encodes as tiktoken does; older versions split pieces equal to those tokens";
  oj added = oj::array();
  for (const auto& [text, id] : t.specials()) added.push_back(added_token(text, id));
  const std::string bos = "<|begin_of_text|>";
  const uint32_t bos_id = t.marks.start.value_or(128000);
  const oj tok = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", t.pattern()}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor", bos_before_each_text(bos, bos_id)},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", true},
        {"vocab", bpe.vocab},
        {"merges", bpe.merges}}}};
  write_text(dir + "/tokenizer.json", tok.dump() + "\n");
  const oj cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", max_length},
                  {"bos_token", bos}, {"eos_token", "<|end_of_text|>"}, {"model_input_names", kModelInputNames}};
  write_text(dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
  return {"tokenizer.json", "tokenizer_config.json"};
}

// SentencePiece's BPE as a Hugging Face BPE: every way a normal piece is
// two normal pieces is a merge, ranked by the merged piece's score (best
// first, as SentencePiece merges the best-scoring pair of neighbours first),
// then by the parts' ids.
std::vector<std::string> sentencepiece_merges(const SentencePieceModel& m) {
  std::unordered_map<std::string_view, int> normal;
  for (int id = 0; id < (int)m.pieces.size(); id++)
    if (m.pieces[id].kind == SentencePieceModel::Kind::kNormal) normal.emplace(m.pieces[id].text, id);
  std::vector<std::tuple<float, int, int, int>> ranked;  // -score, merged id, left id, right id
  for (const auto& [text, id] : normal)
    for (size_t cut = 1; cut < text.size(); cut++) {
      const auto l = normal.find(text.substr(0, cut)), r = normal.find(text.substr(cut));
      if (l != normal.end() && r != normal.end()) ranked.emplace_back(-m.pieces[id].score, id, l->second, r->second);
    }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  out.reserve(ranked.size());
  for (const auto& [score, id, l, r] : ranked) {
    const std::string& left = m.pieces[l].text;
    if (left.find(' ') != std::string::npos || m.pieces[r].text.find(' ') != std::string::npos)
      throw CheckpointError("SentencePiece piece " + std::to_string(id) + " holds a space, which a merges line cannot");
    out.push_back(left + " " + m.pieces[r].text);
  }
  return out;
}

// SentencePiece: its tokenizer.model (the slow LlamaTokenizer, llama.cpp's
// converter) and, for a BPE model that keeps the text as it is (Llama 2's:
// "identity" normalizer, spaces kept), a tokenizer.json for
// PreTrainedTokenizerFast that encodes as the model does: spaces as "▁" (and
// one before the text), the recovered merges, byte fallback, the control and
// unknown pieces as special tokens, bos before each text as the run's
// documents had it. Without one, transformers 5 builds its own from
// tokenizer.model and splits runs of spaces otherwise (5.25.0: all 17
// licence texts differ from SentencePiece's ids).
std::vector<std::string> sentencepiece_files(const SentencePieceTokenizer& t, const std::string& model_file,
                                             const std::string& dir, int max_length, std::string* note) {
  using oj = nlohmann::ordered_json;
  std::error_code ec;
  fs::copy_file(model_file, dir + "/tokenizer.model", ec);
  if (ec) throw CheckpointError(model_file + ": cannot copy the SentencePiece model: " + ec.message());
  const SentencePieceModel m = t.model();
  const auto piece = [&](std::optional<uint32_t> id) { return id ? oj(m.pieces.at(*id).text) : oj(nullptr); };
  std::optional<uint32_t> unk;
  for (uint32_t id = 0; id < m.pieces.size(); id++)
    if (m.pieces[id].kind == SentencePieceModel::Kind::kUnknown) unk = id;
  oj cfg = {{"model_max_length", max_length}, {"bos_token", piece(t.ends.bos)}, {"eos_token", piece(t.ends.eos)},
            {"unk_token", piece(unk)}};
  if (t.ends.pad) cfg["pad_token"] = piece(t.ends.pad);
  cfg["model_input_names"] = kModelInputNames;
  if (!m.bpe || m.normalizer != "identity" || m.remove_extra_whitespaces || !m.escape_whitespaces) {
    *note = "the SentencePiece model is " + std::string(m.bpe ? "BPE" : "not BPE") + " with the \"" + m.normalizer +
            "\" normalizer: no tokenizer.json is written (LlamaTokenizer reads tokenizer.model; check its ids "
            "against the data's)";
    cfg["tokenizer_class"] = "LlamaTokenizer";
    cfg["add_bos_token"] = t.ends.bos.has_value(), cfg["add_eos_token"] = false;
    write_text(dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
    return {"tokenizer.model", "tokenizer_config.json"};
  }
  oj vocab = oj::object(), added = oj::array();
  for (uint32_t id = 0; id < m.pieces.size(); id++) {
    vocab[m.pieces[id].text] = id;
    const auto kind = m.pieces[id].kind;
    if (kind == SentencePieceModel::Kind::kControl || kind == SentencePieceModel::Kind::kUnknown) {
      added.push_back(added_token(m.pieces[id].text, id));
    } else if (kind == SentencePieceModel::Kind::kUserDefined) {
      oj a = added_token(m.pieces[id].text, id);
      a["special"] = false;  // matched whole in text, as SentencePiece does, but ordinary text
      added.push_back(a);
    }
  }
  const std::string space = "\u2581";  // SentencePiece's visible space
  const oj replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}};
  oj decoders = oj::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}}});
  if (m.byte_fallback) decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  if (m.add_dummy_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  const oj post = t.ends.bos ? bos_before_each_text(m.pieces.at(*t.ends.bos).text, *t.ends.bos) : oj(nullptr);
  const oj tok = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
      {"normalizer", m.add_dummy_prefix ? oj{{"type", "Sequence"},
                                            {"normalizers", {{{"type", "Prepend"}, {"prepend", space}}, replace}}}
                                        : replace},
      {"pre_tokenizer", nullptr}, {"post_processor", post},
      {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", piece(unk)}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", true}, {"byte_fallback", m.byte_fallback},
        {"ignore_merges", false}, {"vocab", vocab}, {"merges", sentencepiece_merges(m)}}}};
  write_text(dir + "/tokenizer.json", tok.dump() + "\n");
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  cfg["clean_up_tokenization_spaces"] = false;  // decode gives the text back, as SentencePiece's does
  write_text(dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
  return {"tokenizer.model", "tokenizer.json", "tokenizer_config.json"};
}

}  // namespace

std::vector<std::string> write_hf_tokenizer(const std::string& spec, const std::string& tokenizer_dir,
                                            const std::string& dir, int max_length, std::string* why) {
  const size_t colon = spec.find(':');
  const std::string family = spec.substr(0, colon), file = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (family == "gpt2" || family == "llama3") {
    const auto tok = make_tokenizer(spec, tokenizer_dir);
    const auto& bpe = static_cast<const BpeTokenizer&>(*tok);
    return family == "gpt2" ? gpt2_files(bpe, dir, max_length) : llama3_files(bpe, dir, max_length, why);
  }
  const std::string model = family == "sentencepiece" ? file : (spec.size() > 6 && spec.substr(spec.size() - 6) == ".model") ? spec : "";
  if (!model.empty()) {
    const auto tok = make_tokenizer(spec, tokenizer_dir);
    return sentencepiece_files(static_cast<const SentencePieceTokenizer&>(*tok), model, dir, max_length, why);
  }
  *why = "tokenizer \"" + spec + "\": no Hugging Face tokenizer files are written for it (gpt2, llama3 and sentencepiece only)";
  return {};
}

}  // namespace trainer
