#pragma once
// The ids that begin and end a text, and pad a batch, for a model trained on
// a tokenizer's data: what an exported model's config names (bos_token_id,
// eos_token_id, pad_token_id), where generation stops. Unset where the
// tokenizer defines none (bytes, a described tokenizer). The tokenizer
// (data/tokenizer.h) says what they are; the export and the import of
// Hugging Face directories (ckpt/) write and check them.
#include <cstdint>
#include <optional>

namespace trainer {

struct TextEnds {
  std::optional<uint32_t> bos, eos, pad;
};

}  // namespace trainer
