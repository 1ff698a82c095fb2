#pragma once
// One of a layer's tensors under Hugging Face's name, declared by the block
// that owns it (the norms', attention's, the MLP's: layer_hf_params in
// model/layer/layer_decl.h gathers them), which the export and the import
// (ckpt/hf_export.cpp, ckpt/hf_import.cpp) walk.
#include <string>

namespace trainer {

struct HfParam {
  std::string ours;    // after "layers.N." ("attn.wq")
  std::string theirs;  // after the model type's layer prefix ("transformer.h.N.", "model.layers.N.")
  bool transposed = false;  // theirs is [in, out] (GPT-2's Conv1D)
  // Where several of ours are row blocks of one of theirs (GPT-2's c_attn =
  // [q; k; v] and its bias): this one's place among them; -1: the whole.
  int block = -1;
};

}  // namespace trainer
