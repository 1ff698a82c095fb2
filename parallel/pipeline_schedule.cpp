#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace trainer {

const char* op_name(PipeOp op) {
  static const char* names[] = {"recv_act", "forward", "send_act", "recv_grad", "backward", "send_grad"};
  return names[(int)op];
}

std::string check_pipeline(const PipelineSpec& p) {
  if (p.stages < 1 || p.virtual_stages < 1 || p.micro_batches < 1) return "sizes must be >= 1";
  if (p.kind == ScheduleKind::Interleaved && p.virtual_stages > 1 && p.micro_batches % p.stages != 0)
    return "the interleaved schedule needs the micro-batches per step (" +
           std::to_string(p.micro_batches) + ") to be a multiple of pp (" +
           std::to_string(p.stages) + ")";
  if (p.kind == ScheduleKind::OneFOneB && p.virtual_stages != 1)
    return "the 1f1b schedule has one chunk per stage (virtual_stages = 1)";
  return "";
}

PipePeer prev_in_pipeline(const PipelineSpec& p, int stage, int chunk) {
  const int vs = chunk * p.stages + stage - 1;
  return {((vs % p.stages) + p.stages) % p.stages, vs / p.stages, vs >= 0};
}

PipePeer next_in_pipeline(const PipelineSpec& p, int stage, int chunk) {
  const int vs = chunk * p.stages + stage + 1;
  return {vs % p.stages, vs / p.stages, vs < p.stages * p.virtual_stages};
}

namespace {

// The order of compute actions (forward/backward of (micro-batch, chunk)) of
// one stage: warm-up forwards, then one forward one backward, then cool-down.
std::vector<PipeAction> compute_order(const PipelineSpec& p, int s) {
  const int P = p.stages, v = p.virtual_stages, m = p.micro_batches, total = m * v;
  // Virtual micro-batch k: micro-batches go through chunks in groups of P.
  auto unit = [&](int k, bool forward) {
    int chunk = (k % (P * v)) / P;
    if (!forward) chunk = v - 1 - chunk;
    const int mb = (k / (P * v)) * P + k % P;
    return PipeAction{forward ? PipeOp::Forward : PipeOp::Backward, mb, chunk};
  };
  const int warmup = v == 1 ? std::min(P - s - 1, m) : std::min((P - s - 1) * 2 + (v - 1) * P, total);
  std::vector<PipeAction> out;
  for (int k = 0; k < warmup; k++) out.push_back(unit(k, true));
  for (int i = 0; i < total - warmup; i++) {
    out.push_back(unit(warmup + i, true));
    out.push_back(unit(i, false));
  }
  for (int k = total - warmup; k < total; k++) out.push_back(unit(k, false));
  return out;
}

}  // namespace

std::vector<std::vector<PipeAction>> build_schedule(const PipelineSpec& p) {
  std::vector<std::vector<PipeAction>> sched(p.stages);
  for (int s = 0; s < p.stages; s++)
    for (const PipeAction& a : compute_order(p, s)) {
      const bool has_prev = prev_in_pipeline(p, s, a.chunk).exists;
      const bool has_next = next_in_pipeline(p, s, a.chunk).exists;
      if (a.op == PipeOp::Forward) {
        if (has_prev) sched[s].push_back({PipeOp::RecvAct, a.mb, a.chunk});
        sched[s].push_back(a);
        if (has_next) sched[s].push_back({PipeOp::SendAct, a.mb, a.chunk});
      } else {
        if (has_next) sched[s].push_back({PipeOp::RecvGrad, a.mb, a.chunk});
        sched[s].push_back(a);
        if (has_prev) sched[s].push_back({PipeOp::SendGrad, a.mb, a.chunk});
      }
    }
  return sched;
}

SimResult simulate(const PipelineSpec& p, const std::vector<std::vector<PipeAction>>& sched,
                   int fwd_units, int bwd_units) {
  SimResult res;
  const int P = p.stages;
  std::vector<size_t> pc(P, 0);
  std::vector<long> t(P, 0), busy(P, 0);
  std::vector<std::set<std::pair<int, int>>> live(P);  // (mb, chunk) with stored activations
  res.stage_peak_in_flight.assign(P, 0);
  // Messages in flight: (kind 0 act / 1 grad, to stage, to chunk, mb) -> send time
  std::map<std::tuple<int, int, int, int>, long> sent;
  std::set<std::tuple<int, int, int, int>> done;  // (stage, op, mb, chunk) executed
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < P; s++) {
      while (pc[s] < sched[s].size()) {
        const PipeAction& a = sched[s][pc[s]];
        if (!done.insert({s, (int)a.op, a.mb, a.chunk}).second) {
          res.error = "stage " + std::to_string(s) + " repeats " + op_name(a.op);
          return res;
        }
        bool blocked = false;
        switch (a.op) {
          case PipeOp::RecvAct:
          case PipeOp::RecvGrad: {
            const auto key = std::make_tuple(a.op == PipeOp::RecvAct ? 0 : 1, s, a.chunk, a.mb);
            const auto it = sent.find(key);
            if (it == sent.end()) {
              blocked = true;
              done.erase({s, (int)a.op, a.mb, a.chunk});
            } else {
              t[s] = std::max(t[s], it->second);
              sent.erase(it);
            }
            break;
          }
          case PipeOp::SendAct:
          case PipeOp::SendGrad: {
            const PipePeer peer = a.op == PipeOp::SendAct ? next_in_pipeline(p, s, a.chunk)
                                                          : prev_in_pipeline(p, s, a.chunk);
            if (!peer.exists) {
              res.error = "stage " + std::to_string(s) + " sends past the pipeline's end";
              return res;
            }
            sent[{a.op == PipeOp::SendAct ? 0 : 1, peer.stage, peer.chunk, a.mb}] = t[s];
            break;
          }
          case PipeOp::Forward:
            t[s] += fwd_units, busy[s] += fwd_units;
            live[s].insert({a.mb, a.chunk});
            res.stage_peak_in_flight[s] = std::max(res.stage_peak_in_flight[s], (int)live[s].size());
            break;
          case PipeOp::Backward:
            if (!live[s].erase({a.mb, a.chunk})) {
              res.error = "stage " + std::to_string(s) + " runs backward before forward";
              return res;
            }
            t[s] += bwd_units, busy[s] += bwd_units;
            break;
        }
        if (blocked) break;
        pc[s]++;
        progress = true;
      }
    }
  }
  for (int s = 0; s < P; s++)
    if (pc[s] < sched[s].size()) res.deadlock = true;
  if (!sent.empty() && res.error.empty()) res.error = "a message is sent but never received";
  res.makespan = *std::max_element(t.begin(), t.end());
  for (int s = 0; s < P; s++) res.idle.push_back(res.makespan - busy[s]);
  res.peak_in_flight = *std::max_element(res.stage_peak_in_flight.begin(), res.stage_peak_in_flight.end());
  return res;
}

}  // namespace trainer
