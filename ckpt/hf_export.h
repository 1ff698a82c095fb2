#pragma once
// A checkpoint as whole tensors, and its export with Hugging Face names
// (docs/ARCHITECTURE.md, "Checkpoints"). No MPI: `trainer ckpt` runs it.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/text_ends.h"
#include "runtime/dtype.h"

namespace trainer {

struct GlobalTensor {
  std::vector<int> shape;
  std::vector<float> data;
};

// Every model tensor of the checkpoint assembled to its global shape
// (load_pieces checks each is complete and consistent). Throws CheckpointError.
std::map<std::string, GlobalTensor> assemble_checkpoint(const std::string& step_dir);

// The transformers release whose config format the export follows (the one
// scripts/setup.sh pins and the tests load it with).
constexpr const char* kHfTransformersVersion = "4.46.3";

// One HDF5 file with Hugging Face names and layouts (GPT-2's Conv1D weights
// transposed, q|k|v fused as c_attn), in fp32 or rounded to bf16 (nearest
// even), the model's hyperparameters as root attributes. Written to OUT.tmp
// and renamed when whole: a failed export (a full disk) leaves no file that
// looks like a model. Throws CheckpointError.
void export_hf(const std::map<std::string, GlobalTensor>& t, const ModelConfig& m, const std::string& out_path,
               DType dtype = DType::F32, const TextEnds& ends = {});

// Whether `path` is a file export_hf wrote (HDF5 with the config.json root
// attribute): what `ckpt export --output` may replace without --force.
bool is_hf_h5_export(const std::string& path);

// A Hugging Face model directory that transformers' from_pretrained loads
// as it is: config.json (GPT2Config / LlamaConfig), generation_config.json
// when the tokenizer has an eos (generation stops there), and
// model.safetensors, or shards of at most max_shard_bytes with
// model.safetensors.index.json. A tied head is stored once (the embedding). The
// directory must not exist or be empty; it is filled under DIR.tmp and
// renamed when whole; `extra` may add files there first (the tokenizer's)
// and returns their names. Returns the files written.
std::vector<std::string> export_hf_dir(
    const std::map<std::string, GlobalTensor>& t, const ModelConfig& m, const std::string& out_dir, DType dtype,
    size_t max_shard_bytes, const TextEnds& ends,
    const std::function<std::vector<std::string>(const std::string& dir)>& extra = {});

// Our name -> Hugging Face's within a Llama layer, as the blocks declare
// them (model/layer/layer_decl.h layer_hf_params; "attn.wq" ->
// "self_attn.q_proj.weight"; the MLP's as its kind declares them), for
// export and import alike.
std::map<std::string, std::string> llama_layer_names(const ModelConfig& m);

// config.json for the model; generation_config.json ("" without an eos).
// The tokenizer's special ids (`ends`, those inside the vocabulary) go into
// both; unset ones are written as null, so that loaders do not fall back to
// defaults of their own (LlamaConfig's 1 and 2, ordinary tokens of other
// vocabularies).
std::string hf_config_json(const ModelConfig& m, DType dtype, const TextEnds& ends);
std::string hf_generation_config_json(const ModelConfig& m, const TextEnds& ends);

}  // namespace trainer
