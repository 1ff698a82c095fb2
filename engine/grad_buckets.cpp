#include "engine/grad_buckets.h"

#include <algorithm>

#include "runtime/elapsed.h"

namespace trainer {

namespace {
// One data-parallel call moves at most this many elements (MPI counts are int).
constexpr size_t kMaxElems = size_t(1) << 28;
}  // namespace

GradBuckets::GradBuckets(Backend& be, Chunks& chunks, DataComm& dp, Buffer* wire, size_t bucket_bytes,
                         const std::function<bool(const ParamInfo&)>& held_back,
                         const std::function<bool(const ParamInfo&)>& elsewhere)
    : be_(be), chunks_(chunks), dp_(dp), wire_(wire && *wire ? wire : nullptr) {
  const size_t bucket_elems = std::max<size_t>(1, bucket_bytes / sizeof(float));
  size_t wire_off = 0;
  std::vector<Bucket> late;
  for (size_t c = 0; c < chunks.size(); c++) {
    wire_offset_.push_back(wire_off);
    wire_off += chunks[c]->num_params();
    Bucket fresh;
    fresh.chunk = (int)c;
    Bucket held = fresh, cur = fresh;
    size_t in_cur = 0;
    auto add = [](Bucket& b, const ParamInfo& p) {
      // Tensors come in falling offsets: extend the segment below or start one.
      for (size_t lo = p.offset; lo < p.offset + p.numel; lo += kMaxElems) {
        const size_t n = std::min(kMaxElems, p.offset + p.numel - lo);
        if (!b.segments.empty() && b.segments.back().lo == lo + n && b.segments.back().n + n <= kMaxElems)
          b.segments.back().lo = lo, b.segments.back().n += n;
        else
          b.segments.push_back({lo, n});
      }
      b.lo = p.offset;
    };
    const auto& all = chunks[c]->registry().all();
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (elsewhere && elsewhere(*it)) continue;
      if (held_back(*it)) {
        add(held, *it);
        continue;
      }
      add(cur, *it);
      in_cur += it->numel;
      if (in_cur >= bucket_elems) {
        buckets_.push_back(std::move(cur));
        cur = fresh;
        in_cur = 0;
      }
    }
    if (!cur.segments.empty()) buckets_.push_back(std::move(cur));
    if (!held.segments.empty()) {
      held.held = true;  // never started from the hook
      late.push_back(std::move(held));
    }
  }
  for (Bucket& b : late) buckets_.push_back(std::move(b));
}

Ref GradBuckets::grad(const Bucket& b, const Segment& s) const { return chunks_[b.chunk]->grads().ref(s.lo); }
Ref GradBuckets::travels(const Bucket& b, const Segment& s) const {
  return wire_ ? wire_->ref(wire_offset_[b.chunk] + s.lo) : grad(b, s);
}

void GradBuckets::begin_step() {
  for (Bucket& b : buckets_) b.started = b.done = false, b.handles.clear();
  any_started_ = false;
  exposed_ms_ = last_done_ms_ = 0;
}

void GradBuckets::start(Bucket& b) {
  if (!any_started_) {
    // The reduction reads what the backward wrote: on a device, the
    // communication stream waits for the compute stream to get here.
    first_start_ = Clock::now();
    any_started_ = true;
  }
  be_.wait_event(Backend::kCommStream, be_.record_event(Backend::kComputeStream));
  for (const Segment& s : b.segments) {
    if (wire_) be_.convert(travels(b, s), grad(b, s), s.n);
    b.handles.push_back(dp_.start_allreduce(travels(b, s), s.n, ReduceOp::Sum));
  }
  b.started = true;
}

// Tests what is in flight: MPI moves non-blocking collectives on only when
// called. Completion times give the span of the communication.
void GradBuckets::poll() {
  for (Bucket& b : buckets_) {
    if (!b.started || b.done) continue;
    bool all = true;
    for (DataComm::Handle h : b.handles) all = dp_.test(h) && all;
    if (all) b.done = true, last_done_ms_ = ms_between(first_start_, Clock::now());
  }
}

void GradBuckets::grads_final(int chunk, size_t from) {
  if (dp_.size() == 1) return;
  for (Bucket& b : buckets_)
    if (b.chunk == chunk && !b.started && !b.held && b.lo >= from) start(b);
  poll();
}

void GradBuckets::finish() {
  if (dp_.size() == 1) return;
  const auto t0 = Clock::now();
  for (Bucket& b : buckets_)
    if (!b.started) start(b);
  for (Bucket& b : buckets_) {
    for (DataComm::Handle h : b.handles) dp_.wait(h);
    if (!b.done) b.done = true, last_done_ms_ = ms_between(first_start_, Clock::now());
    if (wire_)
      for (const Segment& s : b.segments) be_.convert(grad(b, s), travels(b, s), s.n);
  }
  exposed_ms_ = ms_between(t0, Clock::now());
}

}  // namespace trainer
