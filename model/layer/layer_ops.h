#pragma once
// What a layer's blocks run their forward and backward with: the backend,
// this rank's weights and gradients (registry offsets), and the tensor- and
// sequence-parallel movement of rows around column- and row-parallel
// products (Megatron-Core's tensor_parallel mappings). The model owns one
// and binds its collective buffers (model/transformer.cpp).
#include <cstddef>

#include "model/layer/layer_shape.h"
#include "parallel/communicator.h"
#include "runtime/backend.h"

namespace trainer {

struct TensorParallel {
  DataComm* comm = nullptr;        // activations and gradients; null: no tensor parallelism
  ControlComm* control = nullptr;  // the gradient norm's partial sum (with comm)
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
};

// How far a layer's forward runs: the whole layer, or only what its
// backward needs rebuilt (full recomputation: all but the last product;
// selective: what selective recomputation dropped).
enum class Upto { Output, BackwardInputs, DroppedOnly };

struct LayerOps {
  Backend* be = nullptr;
  TensorParallel tp;
  // Host sums over the ranks holding shares of the same sequences
  // (context parallelism); null without it.
  ControlComm* cp_control = nullptr;
  // Expert parallelism: the ranks holding a Mixture-of-Experts layer's
  // experts between them, rows to the experts and back, counts (null: none).
  DataComm* ep = nullptr;
  ControlComm* ep_control = nullptr;
  LayerShape shape{};
  CRef weights;             // the weights products read (the compute type)
  size_t weight_origin = 0; // the registry offset `weights` points at (a gathered unit's first, under ZeRO-3)
  float* grads = nullptr;   // fp32 gradients
  size_t grad_origin = 0;   // the registry offset `grads` points at (a lent unit's first, under ZeRO-2)
  // A layer's persisting vectors (model/param_units.h), a unit of their own
  // before its matrices': registry offsets [lead_lo, lead_hi), in windows of
  // their own (lead_hi = 0: none).
  CRef lead_weights;
  float* lead_grads = nullptr;
  size_t lead_lo = 0, lead_hi = 0;
  // Collective buffers: a product's partial sum over tp [M, d]; this
  // rank's rows [R, d] under sequence parallelism; a gradient's rows
  // reduced [R, d], gathered [M, d].
  Ref part, rows_tmp, g_rows, g_full;

  bool in_lead(size_t offset) const { return offset < lead_hi && offset >= lead_lo; }
  CRef W(size_t offset) const {
    return in_lead(offset) ? lead_weights + (offset - lead_lo) : weights + (offset - weight_origin);
  }
  float* G(size_t offset) const {
    return in_lead(offset) ? lead_grads + (offset - lead_lo) : grads + (offset - grad_origin);
  }
  bool sequence_parallel() const { return shape.R < shape.M; }
  // out[R rows] = resid + in[M, K] @ W^T summed over tp (+ bias): the
  // output of a row-parallel product. All-reduce without sequence
  // parallelism, reduce-scatter with it; no communication with one rank.
  void row_parallel(Ref out, CRef resid, CRef in, int K, size_t w, size_t b, bool has_bias) const;
  // The gradient of a row-parallel output (this rank's rows) as all M rows.
  CRef grad_rows_to_full(CRef g) const;
  // The input gradient of a column-parallel product is a partial sum over
  // tp: reduced to this rank's rows.
  CRef reduce_input_grad(Ref g_partial) const;
};

}  // namespace trainer
