#pragma once
// The parameter registry: every trainable tensor by name, its global shape,
// how it is split over the tensor-parallel group, and the offset of this
// rank's piece in one contiguous buffer. Gradients and optimizer state use
// the same offsets in buffers of the same size; checkpoints store tensors by
// name and global shape.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace trainer {

// How a tensor lives on the tensor-parallel (TP) group.
enum class Sharding {
  Replicated,  // every TP rank holds all of it; its gradient is the same on all
  Dim0,        // rank r holds rows [r*n/tp, (r+1)*n/tp) of dim 0 (column-parallel)
  Dim1,        // rank r holds that slice of dim 1 (row-parallel inputs)
};

struct ParamInfo {
  std::string name;
  std::vector<int> global_shape;
  std::vector<int> shape;  // this rank's piece
  Sharding sharding = Sharding::Replicated;
  // Replicated, but under sequence parallelism each TP rank sees only its
  // share of the tokens, so the gradient is a partial sum to all-reduce over
  // TP (norm weights, biases after row-parallel products, positions).
  bool seq_partial_grad = false;
  // The last pipeline stage's copy of a tied embedding (the first stage owns
  // the original): counted once in the gradient norm, its gradient summed
  // with the original's.
  bool tied_copy = false;
  size_t offset = 0;  // in floats
  size_t numel = 0;   // of this rank's piece
  bool decay = false;  // AdamW weight decay: matrices and embeddings only
  // A Mixture-of-Experts expert's (model/layer/mlp.h): after every other
  // tensor of the chunk, its gradient final only once the backward is done.
  bool expert = false;
};

class ParamRegistry {
 public:
  ParamRegistry(int tp_size = 1, int tp_rank = 0) : tp_(tp_size), rank_(tp_rank) {}
  const ParamInfo& add(const std::string& name, std::vector<int> global_shape, bool decay,
                       Sharding sharding = Sharding::Replicated, bool seq_partial = false,
                       bool tied_copy = false);
  const ParamInfo& at(const std::string& name) const;
  // Moves the vectors (norm weights, biases) among the tensors added from
  // index `from` on ahead of the matrices, each kind in its order (fused
  // neighbours stay neighbours); returns each tensor's (old, new) offset.
  std::vector<std::pair<size_t, size_t>> vectors_first(size_t from);
  const ParamInfo* find(const std::string& name) const;
  // The tensors added from here on are experts (ParamInfo::expert), from
  // offset experts_lo() on (total(): none).
  void begin_experts() { experts_ = true, experts_lo_ = total_; }
  size_t experts_lo() const { return experts_ ? experts_lo_ : total_; }
  const std::vector<ParamInfo>& all() const { return params_; }
  size_t total() const { return total_; }
  int tp_size() const { return tp_; }
  int tp_rank() const { return rank_; }

 private:
  std::vector<ParamInfo> params_;
  size_t total_ = 0, experts_lo_ = 0;
  bool experts_ = false;
  int tp_, rank_;
};

// Offsets of one transformer layer's tensors. Adjacent tensors are laid out
// so that fused products see one matrix: wq|wk|wv is this rank's [q+k+v heads
// x d] projection (and the MLP's, model/layer/mlp.h, may fuse its own).
// A norm's weight and bias (model/layer/norm.h; no bias: RMSNorm).
struct NormParams {
  size_t w = 0, b = 0;
};
struct LayerParams {
  NormParams norm1;
  size_t wqkv, bqkv;  // bqkv: with biases only (ModelConfig::has_bias)
  size_t wo, bo;
  NormParams norm2;
  std::vector<size_t> mlp;  // the MLP's, in its kind's order
};

// The part of the model one pipeline chunk holds: layers [first_layer,
// last_layer), plus the embedding and/or the final norm, LM head and loss.
struct ChunkSpec {
  int first_layer = 0, last_layer = -1;  // -1: to the last layer
  bool embed = true, head = true;
  auto operator<=>(const ChunkSpec&) const = default;
};

struct ModelParams {
  ParamRegistry reg;
  ChunkSpec chunk;  // last_layer resolved
  bool tied = false;  // the LM head is the embedding (model.tie_embeddings)
  size_t wte = 0, wpe = 0, lm_head = 0;
  NormParams normf;
  std::vector<LayerParams> layers;  // the chunk's layers, in order
};

// Builds the registry for a model shape split over tp ranks, Megatron-style:
// q/k/v, MLP-in and the embedding/LM head split on dim 0 (heads, hidden
// units, vocabulary), attention and MLP output projections on dim 1.
// Names follow "layers.3.attn.wq". The shape must divide (validate_tp).
// Under expert parallelism a Mixture-of-Experts layer's experts are split
// over ep ranks: this rank's, ep_rank's part, keep their global names.
ModelParams build_params(const ModelConfig& c, int tp_size = 1, int tp_rank = 0, ChunkSpec chunk = {}, int ep = 1,
                         int ep_rank = 0);

// Problems that stop a model from splitting over tp ranks, as (key, message):
// a [model] key, or "moe.KEY".
std::vector<std::pair<std::string, std::string>> validate_tp(const ModelConfig& c, int tp);

}  // namespace trainer
