#pragma once
// The parameter registry: every trainable tensor by name, global shape and
// offset into one contiguous buffer. Gradients and optimizer state use the
// same offsets in buffers of the same size. Later issues add how a tensor is
// sharded (dim, group); checkpoints store tensors by these names.
#include <cstddef>
#include <string>
#include <vector>

#include "model/config.h"

namespace trainer {

struct ParamInfo {
  std::string name;
  std::vector<int> shape;
  size_t offset = 0;  // in floats
  size_t numel = 0;
  bool decay = false;  // AdamW weight decay: matrices and embeddings only
};

class ParamRegistry {
 public:
  const ParamInfo& add(const std::string& name, std::vector<int> shape, bool decay);
  const ParamInfo& at(const std::string& name) const;
  const ParamInfo* find(const std::string& name) const;
  const std::vector<ParamInfo>& all() const { return params_; }
  size_t total() const { return total_; }

 private:
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
};

// Offsets of one transformer layer's tensors. Adjacent tensors are laid out
// so that fused products see one matrix: wq|wk|wv is the [qkv_dim, d] q|k|v
// projection and w_gate|w_up (llama) the [2*d_ff, d] gate/up projection.
struct LayerParams {
  size_t norm1_w, norm1_b;  // b: gpt2 only
  size_t wqkv, bqkv;        // bqkv: gpt2 only
  size_t wo, bo;
  size_t norm2_w, norm2_b;
  size_t w_in, b_in;        // gpt2: w_fc [d_ff,d]; llama: w_gate|w_up [2*d_ff,d]
  size_t w_out, b_out;      // gpt2: w_proj; llama: w_down  [d, d_ff]
};

struct ModelParams {
  ParamRegistry reg;
  size_t wte = 0, wpe = 0, lm_head = 0, normf_w = 0, normf_b = 0;
  std::vector<LayerParams> layers;
};

// Builds the registry for a model shape (names follow "layers.3.attn.wq").
ModelParams build_params(const ModelConfig& c);

}  // namespace trainer
