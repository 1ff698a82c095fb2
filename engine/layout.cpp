#include "engine/layout.h"

#include <algorithm>

namespace trainer {

RankLayout layout_sizes(const Recipe& r) {
  RankLayout l;
  l.micro_batch = r.training.micro_batch;
  static_cast<GridShape&>(l) = r.parallel.grid;
  l.cp_comm = r.parallel.cp_comm;
  l.cp_overlap = r.parallel.cp_overlap;
  l.zero_stage = r.parallel.zero_stage;
  l.reshard_after_forward = r.parallel.reshard_after_forward;
  l.zero_prefetch = r.parallel.zero_prefetch;
  l.zero_persist_below = r.parallel.zero_persist_below;
  l.compute = r.training.precision;
  l.micro_batches = r.accum_steps();
  l.threads = r.runtime.threads;
  l.sequence_parallel = r.parallel.sequence_parallel;
  l.pipelined = r.parallel.grid.pp > 1;
  l.cuda = r.runtime.backend == "cuda";
  l.deterministic_attention = r.runtime.deterministic_attention;
  return l;
}

RankLayout rank_layout(const Recipe& r, int stage) {
  const PipelineSpec pipe = r.pipeline();
  const int P = pipe.stages, v = pipe.virtual_stages;
  RankLayout l = layout_sizes(r);
  // Slots: the most micro-batches whose forward has run and backward has
  // not, per chunk, in this stage's schedule.
  std::vector<int> live(v, 0), peak(v, 1);
  const auto schedule = build_schedule(pipe);  // (a temporary's element would dangle in the loop)
  for (const PipeAction& a : schedule[stage]) {
    if (a.op == PipeOp::Forward) peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
    if (a.op == PipeOp::Backward) live[a.chunk]--;
  }
  const int per_chunk = r.model.n_layers / (P * v);
  for (int c = 0; c < v; c++) {
    const int vs = c * P + stage;  // the chunk's place in the virtual pipeline
    l.chunks.push_back({ChunkSpec{vs * per_chunk, (vs + 1) * per_chunk, vs == 0, vs == P * v - 1}, peak[c]});
  }
  return l;
}

BackendOptions backend_options(const Recipe& r, int ranks_on_node, int local_rank) {
  BackendOptions o;
  o.kind = r.runtime.backend;
  o.threads = r.runtime.threads;
  o.cpu_kernels = r.runtime.cpu_kernels;
  o.ranks_on_node = ranks_on_node;
  o.local_rank = local_rank;
  o.allow_tf32 = r.runtime.allow_tf32;
  o.deterministic_attention = r.runtime.deterministic_attention;
  return o;
}

}  // namespace trainer
