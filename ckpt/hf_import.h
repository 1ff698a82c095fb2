#pragma once
// A Hugging Face model directory (config.json + safetensors, GPT-2 or
// Llama) as whole tensors under this trainer's names: the inverse of
// export_hf_dir (Conv1D weights transposed back, c_attn split into q, k, v).
// The recipe's model must be the directory's: every differing config field
// and every missing, extra or misshapen tensor is listed in one
// CheckpointError (exit 4).
#include <map>
#include <string>

#include "ckpt/hf_export.h"
#include "model/config.h"

namespace trainer {

// `data_ends`: the special ids of the tokenizer that made the run's data;
// config.json's bos/eos ids must be those (set fields only are checked).
std::map<std::string, GlobalTensor> import_hf_dir(const std::string& dir, const ModelConfig& m,
                                                  const TextEnds& data_ends = {});

}  // namespace trainer
