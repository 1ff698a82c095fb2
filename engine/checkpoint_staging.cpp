#include "engine/checkpoint_staging.h"

#include <algorithm>
#include <cstring>

#include "runtime/errors.h"

namespace trainer {

namespace {
const char* kGroupNames[3] = {"param", "adam_m", "adam_v"};
}

CheckpointStaging::CheckpointStaging(Backend& be, Chunks& chunks, std::vector<std::unique_ptr<AdamW>>& opts,
                                     int stage, int tp_rank, bool writer, bool saves_planned, DataComm* zero_dp,
                                     UnitWeights* weights, int expert_part)
    : be_(be), chunks_(chunks), opts_(opts), stage_(stage), tp_rank_(tp_rank), writer_(writer),
      expert_part_(expert_part), zero_dp_(zero_dp), weights_(weights) {
  if (saves_planned && writer_) {
    std::vector<Piece> all[3];
    ensure_snapshot(shard_elems(saved_groups(all)));
  }
}

size_t CheckpointStaging::shard_elems(const SaveGroups& gs) {
  size_t n = 0;
  for (const auto& [name, ts] : gs)
    for (const TensorPiece& t : ts) n += t.held();
  return n;
}

// Allocated once and touched at once: new pages cost seconds in a VM.
void CheckpointStaging::ensure_snapshot(size_t n) {
  if (snapshot_.count() >= n) return;
  snapshot_ = be_.alloc(n, DType::F32, Mem::Temporaries, Space::Staging);
  std::memset(snapshot_.host(), 0, n * sizeof(float));
}

// The ranges this rank's AdamW keeps (m and v hold them back to back; the
// weights are whole, at their own offsets, or under ZeRO-3 as m and v); a range every rank keeps alike
// (ZeRO-1's tail) is saved by one rank only (OwnedRange::saver), loaded by all. Adjacent
// stretches of one buffer are merged, so a tensor is cut only where the
// owner changes.
std::vector<CheckpointStaging::Span> CheckpointStaging::spans(int which, bool loading, size_t c) {
  const bool whole = which == 0 && !weights_;
  Buffer* buf = which == 0 ? (weights_ ? &weights_->master(c) : &chunks_[c]->params())
                : which == 1 ? &opts_[c]->m() : &opts_[c]->v();
  std::vector<Span> out;
  for (const OwnedRange& o : opts_[c]->owned()) {
    if (o.shared && !loading && !o.saver) continue;
    const size_t at = whole ? o.lo : o.local;
    if (!out.empty() && out.back().hi == o.lo && out.back().buf_at + (o.lo - out.back().lo) == at)
      out.back().hi = o.hi;
    else
      out.push_back({o.lo, o.hi, buf, at});
  }
  return out;
}

std::vector<CheckpointStaging::Piece> CheckpointStaging::pieces(int which, bool loading) {
  std::vector<Piece> out;
  for (size_t c = 0; c < chunks_.size(); c++) {
    Transformer& m = *chunks_[c];
    Buffer* base = which == 0 ? &m.params() : which == 1 ? &opts_[c]->m() : &opts_[c]->v();
    const bool cut = sharded() && (which > 0 || !loading || weights_);  // loads take whole weights, but ZeRO-3's
    const std::vector<Span> ss = cut ? spans(which, loading, c) : std::vector<Span>{};
    for (const ParamInfo& p : m.registry().all()) {
      if (p.tied_copy && !loading) continue;  // the first stage saves the original
      if (expert_part_ > 0 && !p.expert && !loading && !cut) continue;  // part 0's writer saves them
      Piece x;
      x.t.name = p.name;
      x.t.global_shape = p.global_shape;
      x.t.shard_dim = p.sharding == Sharding::Dim0 ? 0 : p.sharding == Sharding::Dim1 ? 1 : -1;
      x.t.start = x.t.shard_dim >= 0 ? tp_rank_ * p.shape[x.t.shard_dim] : 0;
      x.t.numel = p.numel;
      if (!cut) {
        x.dev = base->ref(p.offset);
        out.push_back(x);
        continue;
      }
      for (const Span& s : ss) {
        const size_t lo = std::max(p.offset, s.lo), hi = std::min(p.offset + p.numel, s.hi);
        if (lo >= hi) continue;
        Piece y = x;
        y.t.flat_lo = lo - p.offset, y.t.flat_n = hi - lo;
        y.dev = s.buf->ref(s.buf_at + lo - s.lo);
        out.push_back(y);
      }
    }
  }
  return out;
}

// The saved groups, their pieces pointing nowhere yet (sizes and names only).
SaveGroups CheckpointStaging::saved_groups(std::vector<Piece> (&all)[3]) {
  SaveGroups gs;
  for (int w = 0; w < 3; w++) {
    all[w] = pieces(w, false);
    std::vector<TensorPiece> ts;
    for (const Piece& p : all[w]) ts.push_back(p.t);
    gs.push_back({kGroupNames[w], std::move(ts)});
  }
  return gs;
}

SaveGroups CheckpointStaging::stage(bool side_stream) {
  if (!writer_) return {};
  std::vector<Piece> all[3];
  SaveGroups gs = saved_groups(all);
  ensure_snapshot(shard_elems(gs));
  float* host = static_cast<float*>(snapshot_.host());
  const Backend::Stream s = side_stream ? Backend::kCommStream : Backend::kComputeStream;
  if (side_stream) be_.wait_event(s, be_.record_event(Backend::kComputeStream));  // after this step's update
  size_t off = 0;
  for (int w = 0; w < 3; w++)
    for (size_t i = 0; i < all[w].size(); i++) {
      be_.to_host_async(host + off, all[w][i].dev, all[w][i].t.held(), s);
      gs[w].second[i].data = host + off;
      off += all[w][i].t.held();
    }
  if (side_stream) {
    snapshot_done_ = be_.record_event(s);
    be_.wait_event(Backend::kComputeStream, snapshot_done_);  // the next update waits for the copies
  } else {
    be_.synchronize();  // the copies are complete before anything reads the snapshot
  }
  return gs;
}

std::string CheckpointStaging::shard_file() const {
  const std::string dp = sharded() ? "_dp" + std::to_string(zero_dp_->rank()) : "";
  const std::string ep = expert_part_ > 0 ? "_ep" + std::to_string(expert_part_) : "";
  return "pp" + std::to_string(stage_) + "_tp" + std::to_string(tp_rank_) + dp + ep + ".h5";
}

std::string CheckpointStaging::save(const std::string& dir, const TrainingState& st, int keep,
                                    ControlComm& world, const std::string& recipe_text,
                                    const std::function<void(const char*)>& at_point) {
  return save_checkpoint(dir, st, writer_, shard_file(), stage(), keep, world, recipe_text, at_point);
}

void CheckpointStaging::start_async(const std::string& dir, const TrainingState& st, int keep,
                                    ControlComm& world, const std::string& recipe_text) {
  // The previous async save has been committed (the caller waits for it), so
  // the snapshot is free to overwrite.
  async_.start(dir, st, writer_, shard_file(), stage(true), {}, keep, recipe_text, world,
               [this] { be_.synchronize_event(snapshot_done_); });
}

size_t CheckpointStaging::file_bytes() {
  if (!writer_) return 0;
  std::vector<Piece> all[3];
  return shard_bytes(saved_groups(all));
}

// Read into host staging, then copied to the backend.
void CheckpointStaging::load(const std::string& step_dir) {
  for (int w = 0; w < 3; w++) {
    std::vector<Piece> ps = pieces(w, true);
    size_t n = 0;
    for (const Piece& p : ps) n += p.t.held();
    Buffer host = be_.alloc(n, DType::F32, Mem::Temporaries, Space::Staging);
    float* h = static_cast<float*>(host.host());
    std::vector<TensorPiece> ts;
    size_t off = 0;
    for (Piece& p : ps) {
      p.t.data = h + off;
      off += p.t.held();
      ts.push_back(p.t);
    }
    load_pieces(step_dir, kGroupNames[w], ts);
    for (const Piece& p : ps) be_.from_host(p.dev, p.t.data, p.t.held());
  }
  be_.synchronize();
}

namespace {
std::string shape_text(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " x ") + std::to_string(x);
  return "[" + s + "]";
}

// This rank's piece of a whole tensor (row-major): rows, or columns of every
// row, from p.start along p.shard_dim.
void copy_slice(const GlobalTensor& g, const TensorPiece& p, float* dst) {
  if (p.shard_dim < 0) return (void)std::copy(g.data.begin(), g.data.end(), dst);
  const size_t cols = g.shape.size() == 2 ? (size_t)g.shape[1] : 1;
  if (p.shard_dim == 0) return (void)std::copy_n(g.data.begin() + p.start * cols, p.numel, dst);
  const size_t rows = (size_t)g.shape[0], local = p.numel / rows;
  for (size_t r = 0; r < rows; r++) std::copy_n(g.data.begin() + r * cols + p.start, local, dst + r * local);
}
}  // namespace

void CheckpointStaging::load_params(const std::map<std::string, GlobalTensor>& t, const std::string& source) {
  std::vector<Piece> ps = pieces(0, true);
  std::string problems;
  for (const Piece& p : ps) {
    const auto it = t.find(p.t.name);
    if (it == t.end()) problems += "\n  tensor " + p.t.name + ": missing";
    else if (it->second.shape != p.t.global_shape)
      problems += "\n  tensor " + p.t.name + ": shape " + shape_text(it->second.shape) + ", the model's " +
                  shape_text(p.t.global_shape);
  }
  if (!problems.empty()) throw CheckpointError(source + " does not match the recipe's model:" + problems);
  for (const Piece& p : ps) {
    std::vector<float> host(p.t.numel);
    copy_slice(t.at(p.t.name), p.t, host.data());
    be_.from_host(p.dev, host.data() + p.t.flat_lo, p.t.held());  // (ZeRO-3: the owned part)
  }
  be_.synchronize();
}

}  // namespace trainer
