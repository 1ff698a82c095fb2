#include "planning/pipeline_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

namespace trainer {

namespace {

// The simulation's state: where each stage is in its schedule, what is left
// of the action it is in, and when each sent message arrives.
class SharedRun {
 public:
  SharedRun(const PipelineSpec& pipe, const std::vector<StageWork>& w, double msg_ms, const Slowdown& slowdown)
      : pipe_(pipe), sched_(build_schedule(pipe)), w_(w), msg_ms_(msg_ms), slowdown_(slowdown), st_(pipe.stages),
        out_(pipe.stages) {}

  std::vector<StageTimes> run() {
    // Each round ends a phase (compute or communication) of some action or
    // delivers a message: at most three per action.
    size_t actions = 0;
    for (const auto& stage : sched_) actions += stage.size();
    for (size_t round = 0;; round++) {
      if (round > 3 * actions + 8) throw std::logic_error("the step model's simulation makes no progress");
      while (start_ready()) {
      }
      if (all_done()) return out_;
      const double slow = slowdown();
      const double t = next_event(slow);
      if (!std::isfinite(t)) throw std::logic_error("the pipeline schedule deadlocks in the step model");
      advance(t, slow);
    }
  }

 private:
  struct State {
    size_t next = 0;
    bool busy = false;
    double compute = 0, comm = 0, started = 0;
  };
  using Key = std::tuple<int, int, int>;  // (gradient?, micro-batch, receiving virtual stage)

  Key key_of(const PipeAction& a, int s) const { return {a.op == PipeOp::RecvGrad, a.mb, a.chunk * pipe_.stages + s}; }
  int vstage(const PipePeer& p) const { return p.chunk * pipe_.stages + p.stage; }
  bool all_done() const {
    for (int s = 0; s < pipe_.stages; s++)
      if (st_[s].next < sched_[s].size()) return false;
    return true;
  }

  // Starts what can start now (sends and arrived receives take no time);
  // whether anything moved.
  bool start_ready() {
    bool moved = false;
    for (int s = 0; s < pipe_.stages; s++) {
      State& x = st_[s];
      if (x.busy || x.next == sched_[s].size()) continue;
      const PipeAction& a = sched_[s][x.next];
      if (a.op == PipeOp::RecvAct || a.op == PipeOp::RecvGrad) {
        auto it = arrival_.find(key_of(a, s));
        if (it == arrival_.end() || it->second > now_) continue;
      } else if (a.op == PipeOp::SendAct) {
        arrival_[{0, a.mb, vstage(next_in_pipeline(pipe_, s, a.chunk))}] = now_ + msg_ms_;
      } else if (a.op == PipeOp::SendGrad) {
        arrival_[{1, a.mb, vstage(prev_in_pipeline(pipe_, s, a.chunk))}] = now_ + msg_ms_;
      } else {
        const bool f = a.op == PipeOp::Forward;
        x.busy = true, x.started = now_;
        x.compute = f ? w_[s].fwd[a.chunk] : w_[s].bwd[a.chunk];
        x.comm = f ? w_[s].fwd_comm[a.chunk] : w_[s].bwd_comm[a.chunk];
        out_[s].full += x.compute + x.comm;
        if (!f) out_[s].last_bwd = x.compute;
      }
      if (!x.busy) x.next++, out_[s].end = now_;
      moved = true;
    }
    return moved;
  }

  // How much slower compute runs now, by the node's ranks computing.
  double slowdown() const {
    if (!slowdown_) return 1.0;
    double busy = 0;
    for (int s = 0; s < pipe_.stages; s++)
      if (st_[s].busy && st_[s].compute > 0) busy += w_[s].ranks;
    return slowdown_(busy);
  }

  // The next action end or message arrival.
  double next_event(double slow) const {
    double t = std::numeric_limits<double>::infinity();
    for (int s = 0; s < pipe_.stages; s++) {
      const State& x = st_[s];
      if (x.busy) {
        t = std::min(t, now_ + (x.compute > 0 ? x.compute * slow : x.comm));
      } else if (x.next < sched_[s].size()) {
        auto it = arrival_.find(key_of(sched_[s][x.next], s));
        if (it != arrival_.end()) t = std::min(t, it->second);
      }
    }
    return t;
  }

  // A phase ends when its end, reckoned as next_event reckons it, is not
  // after t: the phase that set t always ends, however far the clock has
  // run. (Subtracting dt with a fixed cut-off did not: past 2^14 ms a
  // remainder under half a unit in the last place of the clock could not
  // move it, and plan --search never finished at long sequences.)
  void advance(double t, double slow) {
    const double dt = t - now_;
    for (int s = 0; s < pipe_.stages; s++) {
      State& x = st_[s];
      if (!x.busy) continue;
      double& left = x.compute > 0 ? x.compute : x.comm;
      const double per_ms = x.compute > 0 ? slow : 1.0;
      left = now_ + left * per_ms <= t ? 0 : std::max(0.0, left - dt / per_ms);
      if (x.compute == 0 && x.comm == 0) {
        x.busy = false, x.next++;
        out_[s].in_action += t - x.started, out_[s].end = t;
      }
    }
    now_ = t;
  }

  const PipelineSpec pipe_;
  const std::vector<std::vector<PipeAction>> sched_;
  const std::vector<StageWork>& w_;
  const double msg_ms_;
  const Slowdown slowdown_;
  std::vector<State> st_;
  std::vector<StageTimes> out_;
  std::map<Key, double> arrival_;
  double now_ = 0;
};

}  // namespace

std::vector<StageTimes> simulate_shared(const PipelineSpec& pipe, const std::vector<StageWork>& w, double msg_ms,
                                        const Slowdown& slowdown) {
  return SharedRun(pipe, w, msg_ms, slowdown).run();
}

}  // namespace trainer
