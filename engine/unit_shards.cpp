#include "engine/unit_shards.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/elapsed.h"

namespace trainer {

UnitShards::UnitShards(Backend& be, Chunks& chunks, DataComm& dp, DataComm* embed, bool tied_embeddings)
    : be_(be), chunks_(chunks), dp_(dp), embed_(embed && embed->size() > 1 ? embed : nullptr),
      tied_(tied_embeddings), wire_type_(chunks.front()->compute_type()) {
  const size_t D = (size_t)dp.size();
  size_t layer_padded = 0, held_padded = 0, largest_slice = 0;
  for (auto& m : chunks) {
    Chunk ch(m->units(), dp.rank(), dp.size());
    ch.shard = be.alloc(owned_count(ch.owned), DType::F32, Mem::Grads);
    ch.whole.resize(ch.units.all.size());
    for (int u = 0; u < (int)ch.units.all.size(); u++) {
      const size_t padded = unit_slice(ch.units.all[u].size(), dp.size()) * D;
      largest_slice = std::max(largest_slice, padded / D);
      if (ch.units.held(u)) {
        ch.whole[u] = be.alloc(padded, DType::F32, Mem::Grads);
        held_padded = std::max(held_padded, padded);
      } else {
        layer_padded = std::max(layer_padded, padded);
      }
    }
    per_.push_back(std::move(ch));
  }
  const bool narrow = wire_type_ != DType::F32;
  for (Window& w : windows_) {
    if (layer_padded) w.grads = be.alloc(layer_padded, DType::F32, Mem::Grads);
    if (narrow && layer_padded) w.wire = be.alloc(layer_padded, wire_type_, Mem::Comm);
    w.landing = be.alloc(largest_slice, wire_type_, Mem::Comm);
  }
  if (narrow && held_padded) held_wire_ = be.alloc(held_padded, wire_type_, Mem::Comm);
  if (narrow) widened_ = be.alloc(largest_slice, DType::F32, Mem::Comm);
}

void UnitShards::lend() {
  for (size_t c = 0; c < chunks_.size(); c++)
    chunks_[c]->lend_grad_windows({[this, c](int u) { return open(c, u); }, [this, c](int u) { close(c, u); }});
}

void UnitShards::begin_step() {
  for (Chunk& ch : per_) {
    be_.zero(ch.shard.ref(), ch.shard.count());
    for (Buffer& h : ch.whole)
      if (h) be_.zero(h.ref(), h.count());
  }
  any_started_ = false;
  exposed_ms_ = last_done_ms_ = 0;
}

float* UnitShards::open(size_t c, int u) {
  if (per_[c].whole[u]) return per_[c].whole[u].ref().f32();  // accumulates over the step
  Window& w = windows_[next_];
  next_ ^= 1;
  const auto t0 = Clock::now();
  wait(w);  // its previous unit has landed (the backward waits: exposed)
  exposed_ms_ += ms_since(t0);
  if (w.chunk >= 0) throw std::logic_error("a gradient window lent twice");
  w.chunk = (int)c, w.unit = u;
  be_.zero(w.grads.ref(), slice(c, u) * dp_.size());
  poll();
  return w.grads.ref().f32();
}

void UnitShards::close(size_t c, int u) {
  if (per_[c].whole[u]) return;  // leaves in finish()
  for (Window& w : windows_) {
    if (w.chunk != (int)c || w.unit != u || w.in_flight) continue;
    chunks_[c]->reduce_sequence_parallel_grads(u, w.grads.ref().f32());
    w.handle = start(c, u, w.grads.ref().f32(), w.wire, w.landing);
    w.in_flight = true;
    poll();
    return;
  }
  throw std::logic_error("a gradient window given back that was not lent");
}

DataComm::Handle UnitShards::start(size_t c, int u, float* window, Buffer& wire, Buffer& landing) {
  if (!any_started_) first_start_ = Clock::now(), any_started_ = true;
  const size_t s = slice(c, u), padded = s * dp_.size();
  // The reduction reads what the backward wrote: on a device, the
  // communication stream waits for the compute stream to get here.
  be_.wait_event(Backend::kCommStream, be_.record_event(Backend::kComputeStream));
  CRef travels = window;
  if (wire) be_.convert(wire.ref(), window, padded), travels = wire.ref();
  return dp_.start_reduce_scatter(travels, landing.ref(), s);
}

void UnitShards::land(size_t c, int u, Buffer& landing) {
  last_done_ms_ = ms_between(first_start_, Clock::now());
  const Chunk& ch = per_[c];
  if (ch.owned_of[u] < 0) return;  // all of this rank's slice is padding
  const OwnedRange& o = ch.owned[ch.owned_of[u]];
  const size_t k = o.hi - o.lo;
  CRef mine = landing.ref();
  if (widened_) be_.convert(widened_.ref(), mine, k), mine = widened_.ref();
  const Ref at = per_[c].shard.ref(o.local);
  be_.add(at, at, mine, k);
}

void UnitShards::wait(Window& w) {
  if (!w.in_flight) return;
  dp_.wait(w.handle);
  land(w.chunk, w.unit, w.landing);
  w.chunk = w.unit = -1, w.in_flight = false;
}

// Tests what is in flight: MPI moves non-blocking collectives on only when called.
void UnitShards::poll() {
  for (Window& w : windows_)
    if (w.in_flight && dp_.test(w.handle)) wait(w);
}

void UnitShards::finish() {
  const auto t0 = Clock::now();
  for (Window& w : windows_) wait(w);
  // The held units: partial gradients over TP, a tied embedding's two
  // copies over the embedding group, then to the owners.
  for (size_t c = 0; c < per_.size(); c++)
    for (int u = 0; u < (int)per_[c].whole.size(); u++)
      if (per_[c].whole[u]) chunks_[c]->reduce_sequence_parallel_grads(u, per_[c].whole[u].ref().f32());
  for (size_t c = 0; c < per_.size() && tied_ && embed_; c++) {
    const ParamInfo* tok = chunks_[c]->registry().find("embed.tok");
    if (!tok || !(chunks_[c]->chunk().embed || chunks_[c]->chunk().head)) continue;
    const int u = per_[c].units.of(tok->offset);
    embed_->allreduce_sum(per_[c].whole[u].ref(tok->offset - per_[c].units.all[u].lo), tok->numel);
  }
  for (size_t c = 0; c < per_.size(); c++)
    for (int u = 0; u < (int)per_[c].whole.size(); u++) {
      Buffer& h = per_[c].whole[u];
      if (!h) continue;
      Buffer& landing = windows_[0].landing;
      dp_.wait(start(c, u, h.ref().f32(), held_wire_, landing));
      land(c, u, landing);
    }
  exposed_ms_ += ms_since(t0);
}

std::vector<Backend::SumSpan> UnitShards::grad_spans() {
  std::vector<Backend::SumSpan> spans;
  for (size_t c = 0; c < per_.size(); c++)
    for (const ParamInfo& p : chunks_[c]->registry().all()) {
      if (p.tied_copy) continue;
      for (const OwnedRange& o : per_[c].owned) {
        const size_t lo = std::max(p.offset, o.lo), hi = std::min(p.offset + p.numel, o.hi);
        if (lo < hi)
          spans.push_back({per_[c].shard.ref(o.local + (lo - o.lo)).f32(), hi - lo,
                           p.sharding == Sharding::Replicated ? 1 : 0});
      }
    }
  return spans;
}

void UnitShards::allgather_weights() {
  be_.wait_event(Backend::kCommStream, be_.record_event(Backend::kComputeStream));
  const size_t r = (size_t)dp_.rank();
  for (size_t c = 0; c < per_.size(); c++) {
    Buffer& w = chunks_[c]->compute_copy() ? *chunks_[c]->compute_copy() : chunks_[c]->params();
    Chunk& ch = per_[c];
    for (int u = 0; u < (int)ch.units.all.size(); u++) {
      const ParamUnit& unit = ch.units.all[u];
      const size_t s = slice(c, u);
      // The padded whole lands in a gradient window, free between steps and
      // at least as large; this rank's slice goes to its place there first
      // and is gathered in place.
      const Ref whole(ch.whole[u] ? ch.whole[u].ref().p : windows_[0].grads.ref().p, w.dtype());
      const size_t lo = std::min(unit.hi, unit.lo + r * s), k = std::min(unit.hi, lo + s) - lo;
      if (k) be_.copy(whole + r * s, w.ref(lo), k);
      dp_.wait(dp_.start_allgather(whole + r * s, whole, s));
      be_.copy(w.ref(unit.lo), whole, unit.size());
    }
  }
}

}  // namespace trainer
