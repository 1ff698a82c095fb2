#include "data/special_text.h"

#include <array>

#include "runtime/errors.h"

namespace trainer {

const char* special_text_name(SpecialText s) {
  return s == SpecialText::Error ? "error" : s == SpecialText::Ordinary ? "text" : "special";
}

bool parse_special_text(const std::string& word, SpecialText* out) {
  for (SpecialText s : {SpecialText::Error, SpecialText::Ordinary, SpecialText::Special})
    if (word == special_text_name(s)) return *out = s, true;
  return false;
}

namespace {
// The first special spelled at or after `from`, the longest where several
// start there (as Hugging Face's added tokens match): (position, index), or
// npos. Candidates are found by their first byte, so text without specials'
// first bytes ('<' for GPT-2's and Llama 3's) is scanned once. Empty
// specials never match (make_tokenizer refuses them).
std::pair<size_t, size_t> next_special(std::string_view text, size_t from,
                                       const std::vector<std::pair<std::string, uint32_t>>& specials,
                                       const std::array<bool, 256>& first) {
  for (size_t i = from; i < text.size(); i++) {
    if (!first[(unsigned char)text[i]]) continue;
    size_t best = specials.size();
    for (size_t k = 0; k < specials.size(); k++) {
      const std::string& s = specials[k].first;
      if (!s.empty() && text.compare(i, s.size(), s) == 0 &&
          (best == specials.size() || s.size() > specials[best].first.size()))
        best = k;
    }
    if (best < specials.size()) return {i, best};
  }
  return {std::string_view::npos, 0};
}
}  // namespace

void encode_text(TokenEncoder& enc, const std::vector<std::pair<std::string, uint32_t>>& specials, SpecialText policy,
                 std::string_view text, const std::string& where, uint64_t offset, std::vector<uint32_t>& out) {
  if (specials.empty() || policy == SpecialText::Ordinary) return enc.encode(text, out);
  std::array<bool, 256> first{};
  for (const auto& s : specials)
    if (!s.first.empty()) first[(unsigned char)s.first[0]] = true;
  size_t from = 0;
  for (;;) {
    const auto [at, k] = next_special(text, from, specials, first);
    if (at == std::string_view::npos) break;
    if (policy == SpecialText::Error)
      throw DataError(where + ": byte " + std::to_string(offset + at) + ": the text \"" + specials[k].first +
                      "\" spells the tokenizer's special token " + std::to_string(specials[k].second) +
                      "; special tokens in text are an error unless allowed (as tiktoken's encode): pass "
                      "--special-tokens text to encode it as ordinary text, or --special-tokens special to encode "
                      "it as the token (what the exported Hugging Face tokenizer does)");
    enc.encode(text.substr(from, at - from), out);
    out.push_back(specials[k].second);
    from = at + specials[k].first.size();
  }
  enc.encode(text.substr(from), out);
}

}  // namespace trainer
