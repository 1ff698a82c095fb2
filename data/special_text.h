#pragma once
// Text that spells one of the tokenizer's special tokens ("<|endoftext|>"
// typed in a web page): one policy for `data prepare`, documented in
// docs/DATA.md, and the exported Hugging Face tokenizer agrees with its
// default. Like tiktoken's encode(), such text is an error unless allowed.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer.h"

namespace trainer {

enum class SpecialText {
  Error,     // refused: the file and byte named (tiktoken's default)
  Ordinary,  // encoded as ordinary text (tiktoken's encode_ordinary)
  Special,   // encoded as the special token (encode(allowed_special="all"); what a Hugging Face tokenizer does)
};
const char* special_text_name(SpecialText s);
// "error", "text" or "special" (the --special-tokens words); false for another.
bool parse_special_text(const std::string& word, SpecialText* out);

// Appends the ids of `text` under `policy`. `where` and `offset` place the
// text for the error: a file and the text's first byte in it, or file:line.
void encode_text(TokenEncoder& enc, const std::vector<std::pair<std::string, uint32_t>>& specials, SpecialText policy,
                 std::string_view text, const std::string& where, uint64_t offset, std::vector<uint32_t>& out);

}  // namespace trainer
