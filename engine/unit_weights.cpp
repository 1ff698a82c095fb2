#include "engine/unit_weights.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/elapsed.h"

namespace trainer {

UnitWeights::UnitWeights(Backend& be, Chunks& chunks, DataComm& dp, bool reshard_after_forward, int prefetch)
    : be_(be), chunks_(chunks), dp_(dp), type_(chunks.front()->compute_type()), prefetch_(prefetch) {
  const size_t D = (size_t)dp.size();
  size_t layer_padded = 0;
  for (auto& m : chunks) {
    Chunk ch(m->units(), dp.rank(), dp.size());
    ch.master = be.alloc(owned_count(ch.owned), DType::F32, Mem::Params);
    ch.kept.resize(ch.units.all.size());
    for (int u = 0; u < (int)ch.units.all.size(); u++) {
      const size_t s = unit_slice(ch.units.all[u].size(), dp.size());
      if (ch.units.held(u) || !reshard_after_forward)
        ch.kept[u].weights = be.alloc(s * D, type_, Mem::Params);
      else
        layer_padded = std::max(layer_padded, s * D);
    }
    per_.push_back(std::move(ch));
  }
  if (layer_padded) turns_.resize(1 + (size_t)prefetch);
  for (Window& w : turns_) w.weights = be.alloc(layer_padded, type_, Mem::Params);
}

void UnitWeights::lend() {
  for (size_t c = 0; c < chunks_.size(); c++)
    chunks_[c]->lend_weight_windows(
        {[this, c](int u, int pass) { return open(c, u, pass); }, [this, c](int u, int pass) { close(c, u, pass); }});
}

void UnitWeights::invalidate() {
  for (Window& w : turns_) {
    finish(w);
    if (w.in_use) throw std::logic_error("weights changed while a layer computes with them");
    w.chunk = w.unit = -1, w.cached = false;
  }
  for (Chunk& ch : per_)
    for (Window& w : ch.kept) finish(w), w.unit = -1;  // gathered again when next asked
}

void UnitWeights::start(size_t c, int u, Window& w) {
  const Chunk& ch = per_[c];
  const size_t s = unit_slice(ch.units.all[u].size(), dp_.size());
  // This rank's slice goes to its own place in the window, in the compute
  // type, and is gathered in place (the padding past it is never read).
  const Ref mine = w.weights.ref((size_t)dp_.rank() * s);
  if (ch.owned_of[u] >= 0) {
    const OwnedRange& o = ch.owned[ch.owned_of[u]];
    be_.convert(mine, ch.master.ref(o.local), o.hi - o.lo);
  }
  // The gather reads what the compute stream wrote.
  be_.wait_event(Backend::kCommStream, be_.record_event(Backend::kComputeStream));
  w.handle = dp_.start_allgather(mine, w.weights.ref(), s);
  w.chunk = (int)c, w.unit = u, w.in_flight = true;
}

void UnitWeights::finish(Window& w) {
  if (!w.in_flight) return;
  const auto t0 = Clock::now();
  dp_.wait(w.handle);
  exposed_ms_ += ms_since(t0);
  w.in_flight = false;
}

UnitWeights::Window* UnitWeights::holding(size_t c, int u) {
  for (Window& w : turns_)
    if (w.chunk == (int)c && w.unit == u) return &w;
  return nullptr;
}

// An empty window, else one a closed unit is still cached in (given up).
UnitWeights::Window* UnitWeights::free_window() {
  for (Window& w : turns_)
    if (!w.in_use && !w.in_flight && w.unit < 0) return &w;
  for (Window& w : turns_)
    if (w.cached && !w.in_use && !w.in_flight) {
      w.cached = false, w.chunk = w.unit = -1;
      return &w;
    }
  return nullptr;
}

// Tests what is in flight: MPI moves non-blocking collectives on only
// inside its calls, so a prefetch travels while the layers compute only if
// something calls in between.
void UnitWeights::poll() {
  for (Window& w : turns_)
    if (w.in_flight && dp_.test(w.handle)) finish(w);
  for (Chunk& ch : per_)
    for (Window& w : ch.kept)
      if (w.in_flight && dp_.test(w.handle)) finish(w);
}

CRef UnitWeights::open(size_t c, int u, int pass) {
  Window* w = kept(c, u) ? &per_[c].kept[u] : holding(c, u);
  if (!w) w = free_window();
  if (!w) throw std::logic_error("no free window to gather a unit's weights into");
  if (w->unit != u) start(c, u, *w);
  finish(*w);
  if (!kept(c, u)) w->in_use = true, w->cached = false;
  prefetch(c, u, pass);
  poll();
  return w->weights.ref();
}

// The pass's next units (layers, and the head after the last forward
// layer) start gathering while u computes: the next `prefetch_` of them,
// into their kept windows or free turn-taking ones. Persisting vectors on
// the way are gathered if stale and not counted: they are small.
void UnitWeights::prefetch(size_t c, int u, int pass) {
  const ParamUnits& units = per_[c].units;
  const int step = pass == 0 ? 1 : -1;
  int ahead = 0;
  for (int next = u + step; ahead < prefetch_ && next >= units.first_layer && next < (int)units.all.size();
       next += step) {
    ahead += units.all[next].persists ? 0 : 1;
    Window* w = kept(c, next) ? &per_[c].kept[next] : holding(c, next);
    if (w && w->unit == next) continue;  // gathered or on its way
    if (!w) w = free_window();
    if (!w) break;
    start(c, next, *w);
  }
}

void UnitWeights::close(size_t c, int u, int pass) {
  if (kept(c, u)) return;  // kept until the weights change
  Window* w = holding(c, u);
  if (!w || !w->in_use) throw std::logic_error("weights given back that were not lent");
  w->in_use = false;
  poll();
  // The head's backward comes next: it stays until its window is needed.
  if (pass == 0 && u == per_[c].units.head) w->cached = true;
  else w->chunk = w->unit = -1;  // dropped: gathered again when next asked
}

}  // namespace trainer
