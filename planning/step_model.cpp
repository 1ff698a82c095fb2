#include "planning/step_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "engine/checkpoint_interval.h"
#include "engine/layout.h"
#include "model/flops.h"
#include "model/param_units.h"
#include "planning/chunk_trace.h"
#include "runtime/errors.h"
#include "planning/pipeline_sim.h"
#include "runtime/units.h"

namespace trainer {

namespace {

void note_once(std::vector<std::string>& v, const std::string& k) {
  if (std::find(v.begin(), v.end(), k) == v.end()) v.push_back(k);
}

}  // namespace

double StepModel::comm(const std::string& op, int group, double bytes, std::vector<std::string>& unpriced) {
  const double ms = p_.comm_time(op, group, bytes);
  if (ms >= 0) return ms;
  note_once(unpriced, comm_key(op, group));
  return 0;
}

CheckpointAdvice checkpoint_advice(double save_s, double mtbf_hours, double step_ms) {
  CheckpointAdvice a;
  a.save_s = save_s;
  const double tau = daly_interval_s(save_s, mtbf_hours * 3600);
  a.every_steps = std::max(1L, std::lround(tau / (step_ms / 1e3)));
  const ExpectedLoss l = expected_loss(a.every_steps * step_ms / 1e3, save_s, mtbf_hours * 3600);
  a.saves_share = l.saves, a.redone_share = l.redone;
  return a;
}

const StepModel::ChunkCost& StepModel::chunk_cost(const Recipe& r, const ChunkSpec& spec, RecomputeMode mode) {
  TraceKey key{spec.last_layer - spec.first_layer, spec.embed, spec.head, shard_shape_of(r)};
  key.shape.recompute.mode = mode;
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  const ChunkTrace t = trace_chunk(r.model, spec, key.shape);
  ChunkCost c;
  std::vector<double> op_ms;
  for (const OpCall& op : t.ops) {
    const double ms = p_.op_time(op, &c.unpriced_ops);
    op_ms.push_back(op.phase == OpPhase::PerStep ? 0 : ms);
    if (op.phase == OpPhase::Forward) c.fwd_ms += ms;
    else if (op.phase == OpPhase::Backward) c.bwd_ms += ms;
  }
  // Each collective of the forward and backward waits for its partners
  // after the compute since the previous one (on shared cores).
  const auto in_schedule = [](const CommCall& cc) { return cc.phase != OpPhase::PerStep; };
  const long n = std::count_if(t.tp_comm.begin(), t.tp_comm.end(), in_schedule);
  const double wait = n ? p_.sync_wait(r.parallel.grid.tp, (c.fwd_ms + c.bwd_ms) / n) : 0;
  for (const CommCall& cc : t.tp_comm) {
    const double ms = comm(cc.op, r.parallel.grid.tp, cc.bytes, c.unpriced_comm) + (in_schedule(cc) ? wait : 0);
    if (cc.phase == OpPhase::Forward) c.fwd_comm_ms += ms;
    else if (cc.phase == OpPhase::Backward) c.bwd_comm_ms += ms;
    else c.per_step_comm_ms += ms;
  }
  price_cp(r, t, op_ms, c);
  c.params = t.params;
  c.boundary_bytes = (double)t.boundary_elems * dtype_size(r.training.precision);
  return cache_[key] = c;
}

// A chunk's context-parallel transfers (the ring's k|v blocks and dK|dV
// sums, or the all-to-alls), each at the profile's figure for its kind,
// group size and bytes. A ring transfer is in flight from when both its send
// and its receive (the ring posts them together, the send first) are posted
// until the first of the two waits: the ops that ran in
// that window (trace order) hide it up to their time, each op's time once;
// an all-to-all is waited for at once. The rest, and what waiting on the
// group's other ranks adds (as for a tensor-parallel collective), is exposed
// in the phase it started in.
void StepModel::price_cp(const Recipe& r, const ChunkTrace& t, const std::vector<double>& op_ms, ChunkCost& c) {
  const int cp = r.parallel.grid.cp;
  const char* kind = r.parallel.cp_comm == CpComm::A2a ? "alltoall" : "ring";
  struct Window {
    const CommCall* call;
    size_t from, to;  // ops [from, to) ran while it was in flight
  };
  std::vector<Window> moves;
  for (size_t k = 0; k < t.cp_comm.size(); k++) {
    const CommCall& cc = t.cp_comm[k];
    if (cc.op == "alltoall") moves.push_back({&cc, cc.started, cc.waited});
    if (cc.op != "send") continue;
    const CommCall* recv = k + 1 < t.cp_comm.size() ? &t.cp_comm[k + 1] : nullptr;
    if (!recv || recv->op != "recv" || recv->bytes != cc.bytes)
      throw std::logic_error("cost model: a context-parallel send without its receive after it in the trace");
    moves.push_back({&cc, std::max(cc.started, recv->started), std::min(cc.waited, recv->waited)});
  }
  if (cp < 2 || moves.empty()) return;
  double compute = 0;
  for (double ms : op_ms) compute += ms;
  const double wait = p_.sync_wait(cp, compute / moves.size());
  std::vector<double> left = op_ms;  // what each op can still hide
  for (const Window& w : moves) {
    double ms = comm(kind, cp, w.call->bytes, c.unpriced_transfers);
    for (size_t i = w.from; i < std::min(w.to, left.size()) && ms > 0; i++) {
      const double hidden = std::min(ms, left[i]);
      ms -= hidden, left[i] -= hidden;
    }
    (w.call->phase == OpPhase::Forward ? c.fwd_comm_ms : c.bwd_comm_ms) += ms + wait;
    c.cp_ms += ms + wait;
  }
}

// Each stage's chunks priced: the simulation's input, and per stage its
// parameters, recompute-free compute and once-per-step collectives.
StepModel::Stages StepModel::price_stages(const Recipe& r, StepPrediction& out) {
  const PipelineSpec pipe = r.pipeline();
  const int P = r.parallel.grid.pp, world = r.parallel.grid.ranks();
  Stages st;
  st.work.resize(P), st.params.assign(P, 0), st.no_recompute.assign(P, 0), st.per_step.assign(P, 0), st.cp.assign(P, 0);
  for (int s = 0; s < P; s++) {
    st.work[s].ranks = (double)(world / P) * std::min(per_node_, world) / world;  // a stage's ranks on one node
    for (const ChunkLayout& ch : rank_layout(r, s).chunks) {
      const ChunkCost& c = chunk_cost(r, ch.spec, r.recompute.mode);
      st.work[s].fwd.push_back(c.fwd_ms + p_.action_ms), st.work[s].bwd.push_back(c.bwd_ms + p_.action_ms);
      st.work[s].fwd_comm.push_back(c.fwd_comm_ms), st.work[s].bwd_comm.push_back(c.bwd_comm_ms);
      st.params[s] += c.params, st.per_step[s] += c.per_step_comm_ms, st.cp[s] += c.cp_ms * pipe.micro_batches;
      out.unpriced_ops += c.unpriced_ops * pipe.micro_batches;
      for (const std::string& k : c.unpriced_comm) note_once(out.unpriced_comm, k);
      for (const std::string& k : c.unpriced_transfers) note_once(out.unpriced_comm, k), note_once(out.unpriced_transfers, k);
      const ChunkCost& base = chunk_cost(r, ch.spec, RecomputeMode::None);
      st.no_recompute[s] += (base.fwd_ms + base.bwd_ms) * pipe.micro_batches;
      if (P > 1) st.msg_ms = comm("send", 2, c.boundary_bytes, out.unpriced_comm);
    }
  }
  return st;
}

// A stage's data-parallel reduction after its schedule: all of it, and the
// part overlapped buckets leave exposed (they hide up to the last backward).
// Over the dp x cp ranks that hold the same weights.
std::pair<double, double> StepModel::dp_reduction(const Recipe& r, int stage, double params, double last_bwd,
                                                  std::vector<std::string>& unpriced) {
  const int dp = (int)r.parallel.grid.weight_replicas();
  const double bytes = params * dtype_size(r.training.precision);
  if (r.parallel.zero_sharded() && r.parallel.zero_stage >= 2) {
    // ZeRO-2 and 3 (engine/unit_shards.h): every micro-batch reduce-scatters
    // each unit's gradients as its backward ends, hidden behind the
    // backward but for the last unit's; the held units' (a tied
    // embedding's) once, after the schedule. ZeRO-2 then all-gathers the
    // updated weights; ZeRO-3 (engine/unit_weights.h) gathers each unit for
    // its forward and again for its backward (an untied embedding and head:
    // once; once a step when kept), each hidden behind the unit before but
    // the first of a pass, and the held units once.
    const double e = dtype_size(r.training.precision);
    double held = 0, layers = 0, ends = 0;  // ends: an untied embedding and head
    int L = 0;  // units taking turns
    const RankLayout rl = rank_layout(r, stage);
    for (const ChunkLayout& ch : rl.chunks) {
      const ModelParams mp = build_params(r.model, r.parallel.grid.tp, 0, ch.spec, r.parallel.grid.ep, 0);
      const ParamUnits u = param_units(mp, rl.persist_below());
      for (int i = 0; i < (int)u.all.size(); i++) {
        const bool once = u.held(i);
        (once ? held : layers) += u.all[i].size() * e;
        L += once ? 0 : 1;
        if (!once && (i == u.embed || i == u.head)) ends += u.all[i].size() * e;
      }
    }
    const int accum = r.pipeline().micro_batches;
    const double layer_share = 1 - 1.0 / std::max(L, 1);
    const double per_mb = comm("reduce_scatter", dp, layers, unpriced);
    double all = accum * per_mb + comm("reduce_scatter", dp, held, unpriced);
    double hidden = std::min(accum * per_mb * layer_share, accum * last_bwd);
    if (r.parallel.zero_stage == 2) {
      all += comm("allgather", dp, bytes, unpriced);
    } else {
      const double gathers =
          r.parallel.reshard_after_forward
              ? accum * (2 * comm("allgather", dp, layers - ends, unpriced) + comm("allgather", dp, ends, unpriced))
              : comm("allgather", dp, layers, unpriced);
      all += gathers + comm("allgather", dp, held, unpriced);
      // Prefetched behind the layer before (engine/unit_weights.h): in every
      // pass, or, kept (reshard_after_forward = false), in the first forward.
      const double passes = r.parallel.reshard_after_forward ? 2.0 * accum : 1.0;
      if (r.parallel.zero_prefetch > 0) hidden += std::min(gathers * layer_share, passes * last_bwd);
    }
    return {all, all - hidden};
  }
  const double all = r.parallel.zero_sharded()
                         ? comm("reduce_scatter", dp, bytes, unpriced) + comm("allgather", dp, bytes, unpriced)
                         : comm("allreduce", dp, bytes, unpriced);
  if (dp == 1 || r.parallel.zero_sharded() || !r.parallel.dp_overlap) return {all, all};
  const double buckets = std::max(1.0, std::ceil(bytes / (r.parallel.dp_bucket_mb * kMiB)));
  return {all, all - std::min(all * (1 - 1 / buckets), last_bwd)};
}

// What every rank does at once after its reduction: the gradient norm,
// AdamW on its part, zeroing; tied-embedding sums between the end stages.
double StepModel::optimizer_ms(const Recipe& r, double params, StepPrediction& out) {
  const int world = r.parallel.grid.ranks();
  const double all_busy = p_.slowdown(std::min(per_node_, world));
  const double owned = r.parallel.zero_sharded() ? params / r.parallel.grid.weight_replicas() : params;
  auto op = [&](const char* name, double bytes) {
    return p_.op_time(OpCall{std::string(name) + " " + std::to_string((long)(bytes / 4)), name, 0, bytes},
                      &out.unpriced_ops);
  };
  double ms = (op("sumsq", 4.0 * params) + op("adamw", 28.0 * owned) + op("zero", 4.0 * params)) * all_busy;
  ms += comm("allreduce", world, 16, out.unpriced_comm);  // the gradient norm's partial sums
  if (r.parallel.grid.pp > 1 && r.model.tie_embeddings)
    ms += comm("allreduce", 2, 4.0 * r.model.vocab_size / r.parallel.grid.tp * r.model.d_model, out.unpriced_comm);
  return ms;
}

StepPrediction StepModel::predict(const Recipe& r) {
  StepPrediction out;
  const PipelineSpec pipe = r.pipeline();
  const int P = r.parallel.grid.pp, world = r.parallel.grid.ranks();
  const Stages st = price_stages(r, out);
  const std::vector<StageTimes> t =
      simulate_shared(pipe, st.work, st.msg_ms, [this](double busy) { return p_.slowdown(busy); });
  // The critical stage: the last to finish its reduction.
  int crit = 0;
  double crit_end = -1;
  for (int s = 0; s < P; s++) {
    const auto [all, exposed] = dp_reduction(r, s, st.params[s], t[s].last_bwd, out.unpriced_comm);
    if (t[s].end + exposed + st.per_step[s] > crit_end) {
      crit = s, crit_end = t[s].end + exposed + st.per_step[s];
      out.dp_comm_ms = all, out.dp_exposed_ms = exposed;
    }
  }
  out.optimizer_ms = optimizer_ms(r, st.params[crit], out);
  out.step_factor = p_.step_factor();
  out.step_ms = (crit_end + out.optimizer_ms) * out.step_factor;
  for (const StageTimes& s : t) {
    out.stage_busy_ms.push_back(s.in_action * out.step_factor);
    out.stage_wait_ms.push_back((s.end - s.in_action) * out.step_factor);
  }
  for (double f : st.work[crit].fwd) out.compute_ms += f * pipe.micro_batches;
  for (double b : st.work[crit].bwd) out.compute_ms += b * pipe.micro_batches;
  out.recompute_ms = out.compute_ms - st.no_recompute[crit];
  out.cp_comm_ms = st.cp[crit];
  out.tp_comm_ms = t[crit].full - out.compute_ms - out.cp_comm_ms + st.per_step[crit];
  out.contention_ms = t[crit].in_action - t[crit].full;
  out.pp_wait_ms = t[crit].end - t[crit].in_action;
  out.tokens_per_s = r.tokens_per_step() / (out.step_ms / 1e3);
  const double per_node = std::min(per_node_, world), nodes = std::ceil(world / per_node);
  // A checkpoint holds fp32 weights and AdamW's m and v once (12 bytes per
  // parameter), written by the nodes' ranks at once to their disks.
  if (p_.disk_mb_per_s > 0)
    out.save_s = 12.0 * build_params(r.model).reg.total() / (p_.disk_mb_per_s * 1e6 * nodes);
  const double peak = p_.gemm_gflops * 1e9 * std::min(per_node, (double)p_.compute_units / p_.threads_per_rank) * nodes;
  out.mfu = peak > 0 ? train_flops_per_token(r.model) * out.tokens_per_s / peak : 0;
  return out;
}

StepModels::StepModels(const std::vector<MachineProfile>& profiles, int ranks_per_node) {
  if (profiles.empty()) throw std::invalid_argument("StepModels needs at least one machine profile");
  models_.reserve(profiles.size());  // each model keeps a reference to its profile, not a copy
  for (const MachineProfile& p : profiles) models_.emplace_back(p, ranks_per_node);
}

StepPrediction StepModels::predict(const Recipe& r) {
  std::vector<StepPrediction> all;
  for (StepModel& m : models_) all.push_back(m.predict(r)), all.back().profile = (int)all.size() - 1;
  std::stable_sort(all.begin(), all.end(),
                   [](const StepPrediction& a, const StepPrediction& b) { return a.step_ms < b.step_ms; });
  return all[(all.size() - 1) / 2];
}

}  // namespace trainer
