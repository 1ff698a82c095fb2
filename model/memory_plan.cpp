#include "model/memory_plan.h"

#include <algorithm>
#include <cmath>

#include "model/adamw.h"
#include "model/param_units.h"
#include "model/layer/attention.h"
#include "model/layer/layer_decl.h"
#include "model/layer/mlp.h"
#include "runtime/backend.h"
#include "runtime/cuda_memory.h"

namespace trainer {

double CudaMemory::total() const {
  return attention_workspace + attention_rows + attention_block + logits_grad_bf16 + rope_table + gemm_workspace +
         nccl_buffers + allocator_reserve;
}

double MemoryPlan::total() const {
  double t = cuda.total();
  for (double b : bytes) t += b;
  return t;
}

namespace {
// The layer's sizes (model/layer/layer_shape.h) as doubles, for the formulas
// below, and this rank's vocabulary rows.
struct Dims {
  double B, T, keys, M, R, d, hd, H, KV, V, Q, att;
};
Dims dims(const LayerShape& s, int vocab_rows) {
  Dims x;
  x.B = s.B, x.T = s.T, x.keys = s.keys, x.M = s.M, x.R = s.R, x.d = s.d, x.hd = s.hd;
  x.H = s.H, x.KV = s.KV, x.V = vocab_rows, x.Q = s.Q, x.att = s.att;
  return x;
}

// Saved activations in bytes, as the blocks declare them (model/layer/
// layer_decl.h, attention.h, mlp.h): what a layer in recompute mode m keeps
// (kept) and what it rebuilds into the workspace its recomputing layers
// share (rebuilt): of its norms and attention, or of its MLP kind.
struct LayerBytes {
  double kept[3] = {}, rebuilt[3] = {};  // by RecomputeMode
};
LayerBytes saved_bytes(const SavedActs& saved, double e) {
  LayerBytes b;
  for (RecomputeMode m : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full})
    for (const SavedAct& a : saved) (kept_in(a.kept, m) ? b.kept : b.rebuilt)[(int)m] += a.elems * (a.fp32 ? 4 : e);
  return b;
}
LayerBytes norms_and_attention_bytes(const LayerShape& s, double e) {
  SavedActs saved = layer_saved(s);
  for (const SavedAct& a : Attention::saved(s)) saved.push_back(a);
  return saved_bytes(saved, e);
}
// The MLP kinds of layers [first, last), each once.
std::vector<const Mlp*> mlp_kinds(const ModelConfig& c, int first, int last) {
  std::vector<const Mlp*> kinds;
  for (int l = first; l < last; l++)
    if (std::find(kinds.begin(), kinds.end(), &mlp_for(c, l)) == kinds.end()) kinds.push_back(&mlp_for(c, l));
  return kinds;
}
// Backward scratch in elements of the compute type, of a chunk of layers [first, last).
double scratch_elems(const ModelConfig& c, const LayerShape& s, int first, int last) {
  double n = 0;
  for (size_t x : layer_scratch(s)) n += x;
  for (size_t x : Attention::scratch(s)) n += x;
  for (const Mlp* kind : mlp_kinds(c, first, last))
    for (size_t x : kind->scratch(s)) n += x;
  return n;
}
}  // namespace

// The CUDA backend's own buffers: scratch that grows to the largest call
// (kept once each, and what the caching allocator may keep of their smaller
// predecessors), cuBLASLt's workspace, NCCL's buffers per communicator.
namespace {
CudaMemory plan_cuda_memory(const ModelConfig& c, const LayerShape& shape, const Dims& x, const RankLayout& l) {
  CudaMemory m;
  const bool bf16 = l.compute == DType::BF16;
  bool head = false, embed = false;
  for (const ChunkLayout& ch : l.chunks) head |= ch.spec.head, embed |= ch.spec.embed;
  Attention::plan_cuda(shape, l, m);  // its workspace, rows, pair block and what the allocator keeps of them
  if (bf16 && head) m.logits_grad_bf16 = x.M * x.V * 2;
  if (c.rope_positions()) m.rope_table = x.T * x.hd * 4;
  m.gemm_workspace = cuda_memory::kGemmWorkspaceBytes;
  // One communicator per group of more than one rank: the world, each
  // dimension's but the pipeline's (its messages go through MPI), the weight
  // replicas' where they are more than dp's, and the first and last stages'
  // embedding group.
  int groups = (l.ranks() > 1) + (l.weight_replicas() > l.dp) + (l.pipelined && (head || embed));
  for (const GridDim& d : kGridDims) groups += grid_dim(d.name) != grid_dim("pp") && l.*d.size > 1;
  m.nccl_buffers = groups * cuda_memory::kNcclBytesPerCommunicator;
  // The scratch slots grow to their largest request; what the allocator keeps
  // is their smaller predecessors. The attention workspace is asked for at
  // its full size by the first backward (the forward's is small), so it
  // leaves nothing behind; the others count once more, as do the
  // attention's blocks (Attention::plan_cuda).
  m.allocator_reserve += m.attention_rows + m.logits_grad_bf16 + m.rope_table;
  return m;
}
}  // namespace

MemoryPlan plan_memory(const ModelConfig& c, const RankLayout& l, const RecomputeConfig& rc) {
  MemoryPlan p;
  const LayerShape shape = layer_shape(c, l);
  const Dims x = dims(shape, c.vocab_size / l.tp);
  const double f = 4, e = (double)dtype_size(l.compute);  // bytes: fp32, compute type
  const bool narrow = l.compute != DType::F32;
  const LayerBytes k = norms_and_attention_bytes(shape, e);
  double zero_block = 0;  // bytes of the largest chunk's ZeRO-1 block (one buffer serves all)
  const int replicas = (int)l.weight_replicas();
  // ZeRO-2 (engine/unit_shards.h): the padded sizes of the largest unit
  // taking turns (a layer, an untied embedding or head), of the largest held
  // unit (a tied embedding's), and the largest slice.
  double layer_padded = 0, held_padded = 0, largest_slice = 0;
  double turn_padded = 0;  // ZeRO-3: the largest unit gathered in the windows that take turns
  for (const ChunkLayout& ch : l.chunks) {
    const ModelParams mp = build_params(c, l.tp, 0, ch.spec, l.ep, 0);
    const double n = (double)mp.reg.total();
    // fp32 master weights (+ the compute copy), gradients, AdamW m and v.
    // (ZeRO-3: below.)
    if (!l.weights_sharded()) p.bytes[(int)Mem::Params] += n * f + (narrow ? n * e : 0);
    // ZeRO-1: rank 0 keeps the most (its block and the tail), and one block
    // of the compute type passes through a buffer of its own. ZeRO-2: rank
    // 0 keeps the most (the first slice of every unit), as gradients too,
    // and the held units (model/param_units.h) keep windows for the step.
    const bool zero = l.zero_stage == 1 && replicas > 1, units = l.grads_sharded();
    const ParamUnits pu = param_units(mp, l.persist_below());
    // ZeRO-1's regions (engine/grad_reduce.h): under expert parallelism the
    // experts split over the replicas holding the same ones.
    const size_t lo = l.ep > 1 ? mp.reg.experts_lo() : (size_t)n;
    const int expert_replicas = replicas / l.ep;
    std::vector<OwnedRange> zero1 = zero_ranges(lo, 0, replicas);
    if (lo < (size_t)n) {
      const std::vector<OwnedRange> more = zero_ranges((size_t)n - lo, 0, expert_replicas, lo);
      zero1.insert(zero1.end(), more.begin(), more.end());
    }
    const double owned = zero    ? (double)owned_count(zero1)
                         : units ? (double)owned_count(unit_ranges(pu, 0, replicas))
                                 : n;
    p.bytes[(int)Mem::Optimizer] += 2 * owned * f;
    p.bytes[(int)Mem::Grads] += units ? owned * f : n * f;
    // ZeRO-3 (engine/unit_weights.h): rank 0's slices of the master weights,
    // the kept units' gathered windows (the compute type).
    if (l.weights_sharded()) p.bytes[(int)Mem::Params] += owned * f;
    for (int u = 0; units && u < (int)pu.all.size(); u++) {
      const double slice = (double)unit_slice(pu.all[u].size(), replicas), padded = slice * replicas;
      largest_slice = std::max(largest_slice, slice);
      const bool held = pu.held(u);
      if (held) {
        p.bytes[(int)Mem::Grads] += padded * f;
        held_padded = std::max(held_padded, padded);
      } else {
        layer_padded = std::max(layer_padded, padded);
      }
      if (l.weights_sharded() && (held || !l.reshard_after_forward)) p.bytes[(int)Mem::Params] += padded * e;
      else if (l.weights_sharded()) turn_padded = std::max(turn_padded, padded);
    }
    // Data-parallel gradient traffic in the compute type goes through a copy
    // (ZeRO-2: of one unit at a time, below).
    if (narrow && replicas > 1 && !units) p.bytes[(int)Mem::Comm] += n * e;
    if (zero)
      zero_block = std::max({zero_block, std::floor((double)lo / replicas) * e,
                             expert_replicas > 1 ? std::floor(((double)n - lo) / expert_replicas) * e : 0.0});
    const int layers = ch.spec.last_layer - ch.spec.first_layer;
    double per_slot = 0, workspace = 0;
    std::vector<const Mlp*> rebuilt_kinds;  // the MLP kinds of recomputing layers: a workspace each
    for (int i = 0; i < layers; i++) {
      const RecomputeMode m = rc.applies(i) ? rc.mode : RecomputeMode::None;
      const Mlp& kind = mlp_for(c, ch.spec.first_layer + i);
      const LayerBytes mlp = saved_bytes(kind.saved(shape), e);
      per_slot += k.kept[(int)m] + mlp.kept[(int)m];
      if (m == RecomputeMode::None) continue;
      workspace = k.rebuilt[(int)m];
      if (std::find(rebuilt_kinds.begin(), rebuilt_kinds.end(), &kind) == rebuilt_kinds.end()) rebuilt_kinds.push_back(&kind);
    }
    for (const Mlp* kind : rebuilt_kinds) workspace += saved_bytes(kind->saved(shape), e).rebuilt[(int)rc.mode];
    per_slot += x.R * x.d * e;  // the chunk's output
    // Head: final norm output; its statistics, fp32 logits, losses, the
    // cross entropy's row maxima (this shard's and, under tp, the global
    // ones) and its two row sums.
    const double ce_max = l.tp > 1 ? 2 * x.M : x.M;
    if (ch.spec.head) per_slot += x.M * x.d * e + (2 * x.R + x.M * x.V + x.M + ce_max + 2 * x.M) * f;
    const double tokens = 2 * x.M * 4;  // inputs and targets (int32)
    p.bytes[(int)Mem::Activations] += ch.slots * (per_slot + tokens) + workspace;
    if (ch.spec.head) p.bytes[(int)Mem::Activations] += x.M * f;  // the step's summed per-token losses
    // Backward scratch; tensor-parallel collective buffers.
    p.bytes[(int)Mem::Temporaries] += scratch_elems(c, shape, ch.spec.first_layer, ch.spec.last_layer) * e;
    for (const Mlp* kind : mlp_kinds(c, ch.spec.first_layer, ch.spec.last_layer))
      for (size_t n : kind->scratch32(shape)) p.bytes[(int)Mem::Temporaries] += n * f;
    if (l.tp > 1) p.bytes[(int)Mem::Comm] += x.M * x.d * e;
    // The context-parallel attention's buffers.
    const Attention::Buffers context = Attention::context_buffers(shape, l, e);
    p.bytes[(int)Mem::Comm] += context.comm;
    p.bytes[(int)Mem::Temporaries] += context.temporaries;
    if (l.tp > 1 && l.sequence_parallel) p.bytes[(int)Mem::Comm] += (2 * x.R * x.d + x.M * x.d) * e;
    // Pipeline messages: received activations and gradients, sent gradients.
    if (l.pipelined) {
      const double kinds = (ch.spec.embed ? 0 : 2) + (ch.spec.head ? 0 : 1);
      p.bytes[(int)Mem::Comm] += kinds * l.micro_batches * x.R * x.d * e;
    }
  }
  // Attention backward's per-thread fp32 buffers: probabilities and their
  // gradient for a block of query rows against up to T keys (RoPE's tables
  // fit within them).
  const double rows = Attention::backward_rows(shape, l);
  const double block = std::min<double>(rows, Backend::kAttentionBlock);
  p.bytes[(int)Mem::Temporaries] += l.threads * 2 * block * rows * f;
  p.bytes[(int)Mem::Comm] += zero_block;
  if (l.grads_sharded()) {
    // Two unit windows taking turns (fp32, and their bf16 wire copies),
    // each with a slice it lands in; a bf16 run's held wire and widened slice.
    p.bytes[(int)Mem::Grads] += 2 * layer_padded * f;
    p.bytes[(int)Mem::Comm] += 2 * largest_slice * e;
    if (narrow) p.bytes[(int)Mem::Comm] += 2 * layer_padded * e + held_padded * e + largest_slice * f;
  }
  if (l.weights_sharded()) {
    // 1 + prefetch windows taking turns (each gathered in place).
    const double turns = turn_padded > 0 ? 1 + l.zero_prefetch : 0;
    p.bytes[(int)Mem::Params] += turns * turn_padded * e;
  }
  if (l.cuda) p.cuda = plan_cuda_memory(c, shape, x, l);
  return p;
}

double recompute_extra_flops(const ModelConfig& c, const RankLayout& l, const RecomputeConfig& rc) {
  // Full reruns all but the MLP's output product; selective only an
  // elementwise activation (no products).
  const LayerShape shape = layer_shape(c, l);
  double extra = 0;
  for (const ChunkLayout& ch : l.chunks) {
    const int layers = ch.spec.last_layer - ch.spec.first_layer;
    for (int i = 0; i < layers; i++)
      if (rc.applies(i) && rc.mode == RecomputeMode::Full)
        extra += Attention::rerun_flops(shape) + mlp_for(c, ch.spec.first_layer + i).rerun_flops(shape);
  }
  return extra * l.micro_batches;
}

}  // namespace trainer
