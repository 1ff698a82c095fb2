#pragma once
// Byte-level BPE in tiktoken's form: a ranks file (one "base64(bytes) rank"
// per line), a pre-tokenizer regex run with PCRE2 (JIT), and special tokens
// numbered after the ranks. Equal, token for token, to tiktoken's
// encode_ordinary (tests/e2e/tokenizer_check.py compares on real text).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace trainer {

struct BpeSpec {
  std::string name;
  std::string ranks_file;
  std::string pattern;  // PCRE2 syntax (tiktoken's patterns work as written)
  std::vector<std::pair<std::string, uint32_t>> specials;
  DocumentMarks marks;
  TextEnds ends;
};

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(const BpeSpec& spec);
  ~BpeTokenizer() override;
  std::unique_ptr<TokenEncoder> encoder() const override;
  uint32_t vocab_size() const override { return vocab_; }
  bool splits_at_lines() const override { return true; }

  // The rank of a byte string, or -1.
  int64_t rank(std::string_view bytes) const;
  // Byte-pair merges one pre-token piece, appending the ranks of its parts;
  // only ranks below `below` may join (how the merge list is recovered).
  void merge(std::string_view piece, std::vector<uint32_t>& out, uint32_t below = UINT32_MAX) const;
  // Every (rank, byte string) in rank order, specials excluded.
  std::vector<std::pair<uint32_t, std::string_view>> ranks() const;
  const void* regex() const { return code_; }
  // The pre-tokenizer pattern and special tokens it was made with.
  const std::string& pattern() const { return pattern_; }
  const std::vector<std::pair<std::string, uint32_t>>& specials() const override { return specials_; }

 private:
  std::string pattern_;
  std::vector<std::pair<std::string, uint32_t>> specials_;
  std::string arena_;  // all rank byte strings, back to back
  std::unordered_map<std::string_view, uint32_t> ranks_;
  uint32_t vocab_ = 0;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace trainer
