#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "runtime/errors.h"
#include "runtime/regular_file.h"

namespace trainer {

namespace {
// SentencePieceProcessor::Encode is const and thread-safe: encoders share it.
class SpEncoder : public TokenEncoder {
 public:
  explicit SpEncoder(const sentencepiece::SentencePieceProcessor& sp) : sp_(sp) {}
  void encode(std::string_view text, std::vector<uint32_t>& out) override {
    ids_.clear();
    const auto st = sp_.Encode(absl::string_view(text.data(), text.size()), &ids_);
    if (!st.ok()) throw DataError("sentencepiece: " + st.ToString());
    for (int id : ids_) out.push_back((uint32_t)id);
  }

 private:
  const sentencepiece::SentencePieceProcessor& sp_;
  std::vector<int> ids_;
};
}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  if (const std::string why = not_regular_file(model_file); !why.empty()) throw DataError(model_file + ": " + why);
  const auto st = sp_->Load(model_file);
  if (!st.ok()) throw DataError(model_file + ": cannot load as a SentencePiece model: " + st.ToString());
  name_ = "sentencepiece";
  vocab_ = (uint32_t)sp_->GetPieceSize();
  if (sp_->bos_id() >= 0) marks.start = ends.bos = (uint32_t)sp_->bos_id();
  if (sp_->eos_id() >= 0) ends.eos = (uint32_t)sp_->eos_id();
  if (sp_->pad_id() >= 0) ends.pad = (uint32_t)sp_->pad_id();
  for (int id = 0; id < (int)vocab_; id++)
    if ((sp_->IsControl(id) || sp_->IsUnknown(id)) && !sp_->IdToPiece(id).empty())
      specials_.emplace_back(sp_->IdToPiece(id), (uint32_t)id);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

SentencePieceModel SentencePieceTokenizer::model() const {
  const auto proto = sp_->serialized_model_proto();
  return parse_sentencepiece_model(std::string_view(proto.data(), proto.size()), "SentencePiece model");
}

std::unique_ptr<TokenEncoder> SentencePieceTokenizer::encoder() const { return std::make_unique<SpEncoder>(*sp_); }

}  // namespace trainer
