#pragma once
// What a SentencePiece model file holds that libsentencepiece does not
// expose through its API (Debian's package ships no sentencepiece_model.pb.h):
// each piece's type, the algorithm and the normalizer settings, read from the
// model's protobuf (sentencepiece_model.proto: ModelProto, TrainerSpec,
// NormalizerSpec) with a reader of the few fields needed. Used to write the
// model as a Hugging Face tokenizer.json (data/hf_tokenizer.cpp).
#include <string>
#include <string_view>
#include <vector>

namespace trainer {

struct SentencePieceModel {
  // ModelProto.SentencePiece.Type
  enum class Kind { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  struct Piece {
    std::string text;
    float score = 0;
    Kind kind = Kind::kNormal;
  };
  std::vector<Piece> pieces;           // by id
  bool bpe = false;                    // TrainerSpec.model_type == BPE (else unigram, word or char)
  bool byte_fallback = false;          // TrainerSpec.byte_fallback
  std::string normalizer = "nmt_nfkc";  // NormalizerSpec.name
  bool add_dummy_prefix = true;        // NormalizerSpec.add_dummy_prefix: a "▁" before the text
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;      // spaces become "▁"
};

// Parses a serialized ModelProto; throws DataError naming `what` when the
// bytes are no such message.
SentencePieceModel parse_sentencepiece_model(std::string_view proto, const std::string& what);

}  // namespace trainer
