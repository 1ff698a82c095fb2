#include "planning/chunk_trace.h"

#include <memory>

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

ShardShape shard_shape_of(const Recipe& r) {
  ShardShape s;
  s.micro_batch = r.training.micro_batch, s.tp = r.parallel.grid.tp, s.sequence_parallel = r.parallel.sequence_parallel;
  s.compute = r.training.precision, s.recompute = {r.recompute.mode, r.recompute.layers};
  s.cp = r.parallel.grid.cp, s.cp_comm = r.parallel.cp_comm, s.cp_overlap = r.parallel.cp_overlap;
  return s;
}

ChunkTrace trace_chunk(const ModelConfig& c, const ChunkSpec& chunk, const ShardShape& s, Backend* inner, int reps) {
  MeteredBackend be(inner);
  OpPhase comm_phase = OpPhase::Forward;
  NullDataComm tp(s.tp, &comm_phase);
  NullControlComm tp_control(s.tp);
  const TensorParallel tpar{s.tp > 1 ? &tp : nullptr, s.tp > 1 ? &tp_control : nullptr};
  NullDataComm cp(s.cp, &comm_phase, &be);
  RankLayout layout;  // this shard shape's
  layout.micro_batch = s.micro_batch, layout.tp = s.tp, layout.compute = s.compute;
  layout.sequence_parallel = s.tp > 1 && s.sequence_parallel;
  layout.cp = s.cp, layout.cp_comm = s.cp_comm, layout.cp_overlap = s.cp_overlap;
  ChunkTrace out;
  {
    Transformer m(be, c, layout, ChunkLayout{chunk, 1}, tpar, s.recompute,
                  ContextParallel{s.cp > 1 ? &cp : nullptr});
    out.params = m.num_params();
    out.boundary_elems = m.boundary_elems();
    Buffer act_in = be.alloc(m.boundary_elems(), s.compute, Mem::Temporaries);
    Buffer grad_out = be.alloc(m.boundary_elems(), s.compute, Mem::Temporaries);
    std::vector<int32_t> tokens((size_t)s.micro_batch * c.seq_len + 1, 0);
    // Timing: a warm-up pass first (caches, first-touched pages).
    if (inner) one_pass(m, be, comm_phase, act_in, grad_out, tokens, chunk);
    be.clear_calls();
    tp.clear_calls();
    cp.clear_calls();
    for (int r = 0; r < reps; r++) one_pass(m, be, comm_phase, act_in, grad_out, tokens, chunk);
    be.set_phase(comm_phase = OpPhase::PerStep);
    if (layout.sequence_parallel) m.reduce_sequence_parallel_grads();
    out.ops = be.calls();
  }
  out.tp_comm = tp.calls();
  out.cp_comm = cp.calls();
  return out;
}

}  // namespace trainer
