#include "engine/pipeline_executor.h"

#include <algorithm>

#include "runtime/elapsed.h"

namespace trainer {

PipelineExecutor::PipelineExecutor(Backend& be, const PipelineSpec& spec, int stage, DataComm* pp,
                                   std::vector<std::unique_ptr<Transformer>>& chunks)
    : be_(be), spec_(spec), stage_(stage), pp_(pp), chunks_(chunks) {
  schedule_ = build_schedule(spec_)[stage_];
  last_backward_.assign(chunks_.size(), SIZE_MAX);
  for (size_t i = 0; i < schedule_.size(); i++)
    if (schedule_[i].op == PipeOp::Backward) last_backward_[schedule_[i].chunk] = i;
  for (auto& m : chunks_) {
    free_slots_.emplace_back();
    for (int s = m->slots() - 1; s >= 0; s--) free_slots_.back().push_back(s);
    slot_of_mb_.emplace_back();
  }
}

Ref PipelineExecutor::message_buffer(int kind, int mb, int chunk) {
  Buffer& buf = messages_[{kind, mb, chunk}];
  const Transformer& m = *chunks_[chunk];
  if (!buf) buf = be_.alloc(m.boundary_elems(), m.compute_type(), Mem::Comm);
  return buf.ref();
}

// Message tags: unique per (kind, micro-batch, receiving chunk) within a step.
int PipelineExecutor::tag(int kind, int mb, int chunk) const {
  return (mb * spec_.virtual_stages + chunk) * 2 + kind;
}

int PipelineExecutor::take_slot(int chunk, int mb) {
  const int s = free_slots_[chunk].back();
  free_slots_[chunk].pop_back();
  slot_of_mb_[chunk][mb] = s;
  return s;
}

void PipelineExecutor::release_slot(int chunk, int mb) {
  free_slots_[chunk].push_back(slot_of_mb_[chunk][mb]);
  slot_of_mb_[chunk].erase(mb);
}

void PipelineExecutor::post_recv(const PipeAction& a) {
  const int kind = a.op == PipeOp::RecvAct ? kAct : kGrad;
  const auto key = std::make_tuple(kind, a.mb, a.chunk);
  if (recvs_.count(key)) return;
  const PipePeer peer = kind == kAct ? prev_in_pipeline(spec_, stage_, a.chunk)
                                     : next_in_pipeline(spec_, stage_, a.chunk);
  recvs_[key] = pp_->irecv(message_buffer(kind, a.mb, a.chunk), chunks_[a.chunk]->boundary_elems(),
                           peer.stage, tag(kind, a.mb, a.chunk));
}

// Before compute action i runs, post the receives the next compute action
// waits for, so they arrive while this one computes.
void PipelineExecutor::post_ahead(size_t i) {
  if (!pp_) return;
  for (size_t j = i + 1; j < schedule_.size(); j++) {
    const PipeOp op = schedule_[j].op;
    if (op == PipeOp::Forward || op == PipeOp::Backward) return;
    if (op == PipeOp::RecvAct || op == PipeOp::RecvGrad) post_recv(schedule_[j]);
  }
}

void PipelineExecutor::wait_recv(const PipeAction& a, ScheduleTimes* times) {
  post_recv(a);
  const auto key = std::make_tuple(a.op == PipeOp::RecvAct ? kAct : kGrad, a.mb, a.chunk);
  const auto t0 = Clock::now();
  pp_->wait(recvs_[key]);
  times->pipe_wait_ms += ms_since(t0);
  recvs_.erase(key);
}

void PipelineExecutor::forward(const PipeAction& a, const BatchSource& batch, float grad_scale, size_t i,
                               ScheduleTimes* times) {
  Transformer& m = *chunks_[a.chunk];
  const bool embed = m.chunk().embed, head = m.chunk().head;
  const int32_t* inputs = embed ? batch(a.mb).inputs.data() : nullptr;
  const int32_t* targets = head ? batch(a.mb).targets.data() : nullptr;
  post_ahead(i);
  const int slot = take_slot(a.chunk, a.mb);
  times->peak_in_flight = std::max(times->peak_in_flight, ++in_flight_);
  const auto t0 = Clock::now();
  m.forward(slot, inputs, targets, embed ? CRef() : CRef(message_buffer(kAct, a.mb, a.chunk)), grad_scale);
  times->compute_ms += ms_since(t0);
}

void PipelineExecutor::backward(const PipeAction& a, size_t i, ScheduleTimes* times) {
  Transformer& m = *chunks_[a.chunk];
  post_ahead(i);
  const auto t0 = Clock::now();
  const bool last = hook_ && i == last_backward_[a.chunk];
  if (last) m.set_grad_hook([this, c = a.chunk](size_t from) { hook_(c, from); });
  m.backward(slot_of_mb_[a.chunk][a.mb], m.chunk().head ? CRef() : CRef(message_buffer(kGrad, a.mb, a.chunk)));
  if (last) m.set_grad_hook({});
  times->compute_ms += ms_since(t0);
  // The slot's output may still be in a send: complete it before reuse.
  const auto it = act_sends_.find({kAct, a.mb, a.chunk});
  if (it != act_sends_.end()) {
    pp_->wait(it->second);
    act_sends_.erase(it);
  }
  release_slot(a.chunk, a.mb);
  in_flight_--;
}

void PipelineExecutor::send_act(const PipeAction& a) {
  Transformer& m = *chunks_[a.chunk];
  const PipePeer peer = next_in_pipeline(spec_, stage_, a.chunk);
  act_sends_[{kAct, a.mb, a.chunk}] = pp_->isend(m.output(slot_of_mb_[a.chunk][a.mb]), m.boundary_elems(),
                                                 peer.stage, tag(kAct, a.mb, peer.chunk));
}

void PipelineExecutor::send_grad(const PipeAction& a) {
  Transformer& m = *chunks_[a.chunk];
  const PipePeer peer = prev_in_pipeline(spec_, stage_, a.chunk);
  const Ref buf = message_buffer(kGradOut, a.mb, a.chunk);
  be_.copy(buf, m.input_grad(), m.boundary_elems());
  grad_sends_.push_back(pp_->isend(buf, m.boundary_elems(), peer.stage, tag(kGrad, a.mb, peer.chunk)));
}

// Receives are posted one compute action ahead so they overlap it; sends are
// non-blocking and completed before their buffer is reused.
void PipelineExecutor::run_step(const BatchSource& batch, float grad_scale, ScheduleTimes* times) {
  in_flight_ = 0;
  for (size_t i = 0; i < schedule_.size(); i++) {
    const PipeAction& a = schedule_[i];
    switch (a.op) {
      case PipeOp::RecvAct:
      case PipeOp::RecvGrad: wait_recv(a, times); break;
      case PipeOp::Forward: forward(a, batch, grad_scale, i, times); break;
      case PipeOp::SendAct: send_act(a); break;
      case PipeOp::Backward: backward(a, i, times); break;
      case PipeOp::SendGrad: send_grad(a); break;
    }
  }
  for (auto r : grad_sends_) pp_->wait(r);
  for (auto& [key, r] : act_sends_) pp_->wait(r);
  grad_sends_.clear();
  act_sends_.clear();
}

double PipelineExecutor::forward_only(const Batch& b) {
  const int P = spec_.stages, v = spec_.virtual_stages;
  double loss = 0;
  for (int vs = 0; vs < P * v; vs++) {
    if (vs % P != stage_) continue;
    const int c = vs / P;
    Transformer& m = *chunks_[c];
    CRef in;
    if (vs > 0) {
      const Ref buf = message_buffer(kAct, 0, c);
      pp_->wait(pp_->irecv(buf, m.boundary_elems(), (vs - 1) % P, tag(kAct, 0, c)));
      in = buf;
    }
    const double l = m.forward(0, b.inputs.data(), b.targets.data(), in, 0.f);
    if (m.chunk().head) loss += l;
    if (vs + 1 < P * v)
      pp_->wait(pp_->isend(m.output(0), m.boundary_elems(), (vs + 1) % P, tag(kAct, 0, (vs + 1) / P)));
  }
  return loss;
}

}  // namespace trainer
