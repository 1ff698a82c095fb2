#pragma once
// Tokenizers for `trainer data prepare`: text -> token ids. Three families:
//   bytes          each byte is its token (vocabulary 256)
//   byte-level BPE tiktoken's scheme (GPT-2, Llama-3): a pre-tokenizer regex
//                  cuts text into pieces, each piece is byte-pair merged by rank
//   SentencePiece  a .model file (Llama-2 style), through libsentencepiece
// A Tokenizer is immutable and shared by threads; each thread encodes through
// its own TokenEncoder (regex match data, a cache of pieces seen).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/text_ends.h"

namespace trainer {

class TokenEncoder {
 public:
  virtual ~TokenEncoder() = default;
  // Appends the ids of `text` (valid UTF-8) to out. Special-token text such
  // as "<|endoftext|>" is encoded as ordinary text (tiktoken's
  // encode_ordinary), so documents cannot inject control tokens.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out) = 0;
};

// Tokens put around every document: GPT-2 (as llm.c does) puts
// <|endoftext|> before each document; Llama-2 and Llama-3 a begin-of-text.
struct DocumentMarks {
  std::optional<uint32_t> start, end;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::unique_ptr<TokenEncoder> encoder() const = 0;
  // Every id this tokenizer produces (specials included) is below this.
  virtual uint32_t vocab_size() const = 0;
  // True when a document may be cut after a newline that follows a
  // non-space character and precedes an ASCII letter without changing its
  // tokens (true of the byte-level families; SentencePiece adds a prefix
  // space to every call, so it encodes whole documents).
  virtual bool splits_at_lines() const = 0;
  // Special tokens as (the text that spells one, its id); none by default.
  virtual const std::vector<std::pair<std::string, uint32_t>>& specials() const;
  const std::string& name() const { return name_; }
  DocumentMarks marks;
  TextEnds ends;  // its special ids for an exported model (model/text_ends.h)

 protected:
  std::string name_;
};

// SPEC: "bytes", "gpt2[:RANKS_FILE]", "llama3[:RANKS_FILE]",
// "sentencepiece:MODEL_FILE" (or a path ending in .model), or a path to a
// JSON description of a tiktoken-style tokenizer (docs/DATA.md). Without a
// file, gpt2 and llama3 look in search_dir ($TRAINER_TOKENIZER_DIR, which
// app/environment.h reads; "": none), then third_party/tokenizers/
// (scripts/fetch_tokenizers.sh fills it).
// Throws RecipeError (bad spec) or DataError (unreadable/bad file).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& search_dir);

// The names make_tokenizer knows, for help text.
const char* tokenizer_spec_help();

// Replaces each byte that is not part of valid UTF-8 with U+FFFD, returning
// how many were replaced (0: text is left as it was).
size_t repair_utf8(std::string& text);

// The last place in text where a splits_at_lines() tokenizer may cut it
// (after "\n" preceded by a non-space, before an ASCII letter); 0 if none.
size_t safe_cut(std::string_view text);

}  // namespace trainer
