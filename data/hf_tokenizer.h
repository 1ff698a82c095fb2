#pragma once
// The tokenizer of a run as Hugging Face tokenizer files, so an exported
// model directory loads with AutoTokenizer too:
//   gpt2           vocab.json + merges.txt (GPT-2's byte-to-unicode
//                  alphabet; the merge list recovered from the ranks: the
//                  token of rank r is its two parts merged using only ranks
//                  below r), the same as tokenizer.json, tokenizer_config.json
//   llama3         tokenizer.json for PreTrainedTokenizerFast (its pattern
//                  split, byte-level BPE with the recovered merges, the
//                  special tokens, <|begin_of_text|> before each text)
//   sentencepiece  its tokenizer.model, and for a BPE model as Llama 2's a
//                  tokenizer.json for PreTrainedTokenizerFast (spaces as
//                  "▁", the merges recovered from the piece scores, byte
//                  fallback, bos before each text); other models get a
//                  LlamaTokenizer config only, and *why says so
// Other tokenizers (bytes, described ones) have no files written;
// the returned list is then empty and *why says so (or, with files, what
// a reader should know about them).
#include <string>
#include <vector>

namespace trainer {

// tokenizer_dir: make_tokenizer's search_dir (data/tokenizer.h).
std::vector<std::string> write_hf_tokenizer(const std::string& spec, const std::string& tokenizer_dir,
                                            const std::string& dir, int max_length, std::string* why);

}  // namespace trainer
