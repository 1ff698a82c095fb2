#pragma once
// A SentencePiece .model (Llama-2 style BPE with byte fallback) through
// Debian's libsentencepiece; the model's own bos id goes before each document.
// Its special tokens are the model's control and unknown pieces (<s>, </s>,
// <unk>): the ones a Hugging Face LlamaTokenizer matches in text, so that
// data/special_text.h's one policy covers them as it does tiktoken's.
#include <memory>
#include <string>

#include "data/sentencepiece_model.h"
#include "data/tokenizer.h"

namespace sentencepiece { class SentencePieceProcessor; }

namespace trainer {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_file);
  ~SentencePieceTokenizer() override;
  std::unique_ptr<TokenEncoder> encoder() const override;
  uint32_t vocab_size() const override { return vocab_; }
  bool splits_at_lines() const override { return false; }
  const std::vector<std::pair<std::string, uint32_t>>& specials() const override { return specials_; }
  // The model's pieces and settings (data/sentencepiece_model.h).
  SentencePieceModel model() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  uint32_t vocab_ = 0;
  std::vector<std::pair<std::string, uint32_t>> specials_;
};

}  // namespace trainer
