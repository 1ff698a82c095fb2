#include "planning/chunk_trace.h"

#include <memory>

#include "engine/layout.h"
#include "model/transformer.h"

namespace trainer {

namespace {

// One forward and backward of micro-batch slot 0, as the pipeline runs them.
// comm_phase: what the null communicator files its calls under.
void one_pass(Transformer& m, MeteredBackend& be, OpPhase& comm_phase, Buffer& act_in, Buffer& grad_out,
              const std::vector<int32_t>& tokens, const ChunkSpec& chunk) {
  const int n = (int)tokens.size() - 1;
  be.set_phase(comm_phase = OpPhase::Forward);
  m.forward(0, tokens.data(), tokens.data() + 1, chunk.embed ? CRef() : CRef(act_in.ref()), 1.0f / n);
  be.set_phase(comm_phase = OpPhase::Backward);
  m.backward(0, chunk.head ? CRef() : CRef(grad_out.ref()));
}

}  // namespace

ShardShape shard_shape_of(const RankLayout& l, RecomputeConfig recompute) {
  ShardShape s{l, recompute};
  RankLayout& k = s.layout;
  for (const GridDim& d : kGridDims)
    if (!(kLayerSplitDims & grid_dim(d.name))) k.*d.size = 1;
  k.sequence_parallel = l.sequence_parallel && l.tp > 1;
  const RankLayout plain;
  k.micro_batches = plain.micro_batches, k.threads = plain.threads, k.zero_stage = plain.zero_stage;
  k.pipelined = plain.pipelined, k.cuda = plain.cuda, k.deterministic_attention = plain.deterministic_attention;
  k.chunks.clear();
  return s;
}

ShardShape shard_shape_of(const Recipe& r) {
  return shard_shape_of(layout_sizes(r), {r.recompute.mode, r.recompute.layers});
}

ChunkTrace trace_chunk(const ModelConfig& c, const ChunkSpec& chunk, const ShardShape& s, Backend* inner, int reps) {
  MeteredBackend be(inner);
  OpPhase comm_phase = OpPhase::Forward;
  const RankLayout& l = s.layout;
  // The groups a layer talks over, as rank 0 of each.
  NullDataComm tp(l.tp, &comm_phase);
  NullControlComm tp_control(l.tp);
  const TensorParallel tpar{l.tp > 1 ? &tp : nullptr, l.tp > 1 ? &tp_control : nullptr};
  NullDataComm cp(l.cp, &comm_phase, &be);
  NullControlComm cp_control(l.cp);
  NullDataComm ep(l.ep, &comm_phase);
  NullControlComm ep_control(l.ep);
  ChunkTrace out;
  {
    Transformer m(be, c, l, ChunkLayout{chunk, 1}, tpar, s.recompute,
                  ContextParallel{l.cp > 1 ? &cp : nullptr, l.cp > 1 ? &cp_control : nullptr},
                  ExpertParallel{l.ep > 1 ? &ep : nullptr, l.ep > 1 ? &ep_control : nullptr});
    out.params = m.num_params();
    out.boundary_elems = m.boundary_elems();
    Buffer act_in = be.alloc(m.boundary_elems(), l.compute, Mem::Temporaries);
    Buffer grad_out = be.alloc(m.boundary_elems(), l.compute, Mem::Temporaries);
    std::vector<int32_t> tokens((size_t)l.micro_batch * c.seq_len + 1, 0);
    // Timing: a warm-up pass first (caches, first-touched pages).
    if (inner) one_pass(m, be, comm_phase, act_in, grad_out, tokens, chunk);
    be.clear_calls();
    tp.clear_calls();
    cp.clear_calls();
    for (int r = 0; r < reps; r++) one_pass(m, be, comm_phase, act_in, grad_out, tokens, chunk);
    be.set_phase(comm_phase = OpPhase::PerStep);
    if (l.sequence_parallel) m.reduce_sequence_parallel_grads();
    out.ops = be.calls();
  }
  out.tp_comm = tp.calls();
  out.cp_comm = cp.calls();
  return out;
}

}  // namespace trainer
