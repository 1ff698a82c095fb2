#include "app/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include "app/layout.h"
#include "model/init.h"
#include "model/lr_schedule.h"
#include "parallel/process_grid.h"
#include "runtime/errors.h"

namespace trainer {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
std::unique_ptr<CountingCommunicator> counted(Communicator* c) {
  return c && c->size() > 1 ? std::make_unique<CountingCommunicator>(*c) : nullptr;
}
// Message tags: unique per (kind, micro-batch, receiving chunk) within a step.
int tag(int kind, int mb, int chunk, int chunks) { return (mb * chunks + chunk) * 2 + kind; }
enum { kAct = 0, kGrad = 1, kGradOut = 2 };
}  // namespace

ParallelGroups groups_of(ProcessGrid& g) {
  return {&g.dp(), &g.tp(), &g.pp(), &g.embed()};
}

TrainLoop::TrainLoop(Backend& be, ParallelGroups groups, const Recipe& r,
                     const TokenDataset& train, const TokenDataset* val)
    : be_(be), dp_(*groups.dp), tp_(counted(groups.tp)), pp_(counted(groups.pp)),
      embed_(groups.embed), r_(r), train_(train), val_(val) {
  pipe_ = pipeline_spec(r);
  if ((pp_ ? pp_->size() : 1) != pipe_.stages) throw std::invalid_argument("pp group size differs from the recipe");
  if (const std::string why = check_pipeline(pipe_); !why.empty()) throw std::invalid_argument(why);
  stage_ = pp_ ? pp_->rank() : 0;
  schedule_ = build_schedule(pipe_)[stage_];
  const RankLayout layout = rank_layout(r, stage_);
  std::vector<float> host;
  for (const ChunkLayout& ch : layout.chunks) {
    chunks_.push_back(std::make_unique<Transformer>(
        be, r.model, r.training.micro_batch, TensorParallel{tp_.get(), r.sequence_parallel}, ch.spec,
        ch.slots, r.recompute));
    Transformer& m = *chunks_.back();
    // Every replica and layout draws the same initial weights from the run seed.
    host.assign(m.num_params(), 0.f);
    init_params(m.layout(), r.model, r.run.seed, host.data());
    be_.from_host(m.params(), host.data(), host.size());
    opts_.push_back(std::make_unique<AdamW>(be, m.registry(), r.adamw));
    free_slots_.emplace_back();
    for (int s = ch.slots - 1; s >= 0; s--) free_slots_.back().push_back(s);
    slot_of_mb_.emplace_back();
  }
  make_loader(0);
  if (r.checkpoint.async && dp_.rank() == 0) {
    size_t n = 0;
    for (int w = 0; w < 3; w++)
      for (const TensorPiece& p : pieces(w, false)) n += p.numel;
    snapshot_.assign(n, 0.f);
  }
}

void TrainLoop::make_loader(uint64_t start_position) {
  LoaderConfig lc;
  lc.global_batch = r_.training.global_batch;
  lc.micro_batch = r_.training.micro_batch;
  lc.dp_rank = dp_.rank();
  lc.dp_size = dp_.size();
  lc.prefetch = r_.data.prefetch;
  lc.seed = r_.run.seed;
  lc.start_position = start_position;
  loader_.reset();  // stop the old prefetch thread first
  loader_ = std::make_unique<Loader>(train_, lc);
}

std::vector<TensorPiece> TrainLoop::pieces(int which, bool loading) {
  std::vector<TensorPiece> out;
  for (size_t c = 0; c < chunks_.size(); c++) {
    Transformer& m = *chunks_[c];
    float* base = which == 0 ? m.params() : which == 1 ? opts_[c]->m() : opts_[c]->v();
    const int tp_rank = m.registry().tp_rank();
    for (const ParamInfo& p : m.registry().all()) {
      if (p.tied_copy && !loading) continue;  // the first stage saves the original
      TensorPiece t;
      t.name = p.name;
      t.global_shape = p.global_shape;
      t.shard_dim = p.sharding == Sharding::Dim0 ? 0 : p.sharding == Sharding::Dim1 ? 1 : -1;
      t.start = t.shard_dim >= 0 ? tp_rank * p.shape[t.shard_dim] : 0;
      t.data = base + p.offset;
      t.numel = p.numel;
      out.push_back(std::move(t));
    }
  }
  return out;
}

TrainingState TrainLoop::training_state() const {
  TrainingState st;
  st.step = step_;
  st.samples = loader_->cursor();
  st.adam_steps = opts_.front()->steps_taken();
  st.dp = dp_.size(), st.pp = pipe_.stages, st.tp = tp_ ? tp_->size() : 1;
  return st;
}

std::string TrainLoop::shard_file() const {
  const int tp_rank = tp_ ? tp_->rank() : 0;
  return "pp" + std::to_string(stage_) + "_tp" + std::to_string(tp_rank) + ".h5";
}

std::string TrainLoop::save_checkpoint(const std::string& dir, int keep, Communicator& world,
                                       const std::string& recipe_text,
                                       const std::function<void(const char*)>& at_point) {
  return trainer::save_checkpoint(dir, training_state(), dp_.rank() == 0, shard_file(),
                                  {{"param", pieces(0, false)}, {"adam_m", pieces(1, false)},
                                   {"adam_v", pieces(2, false)}},
                                  keep, world, recipe_text, at_point);
}

void TrainLoop::start_async_save(const std::string& dir, int keep, Communicator& world,
                                 const std::string& recipe_text) {
  const bool writer = dp_.rank() == 0;
  // The snapshot: host copies of what this rank writes (nothing on others).
  SaveGroups groups;
  if (writer) {
    const char* names[] = {"param", "adam_m", "adam_v"};
    size_t off = 0;
    for (int w = 0; w < 3; w++) {
      std::vector<TensorPiece> ps = pieces(w, false);
      for (TensorPiece& p : ps) {
        be_.to_host(snapshot_.data() + off, p.data, p.numel);
        p.data = snapshot_.data() + off;
        off += p.numel;
      }
      groups.push_back({names[w], std::move(ps)});
    }
  }
  // The previous async save has been committed (the caller waits for it), so
  // the snapshot buffer is free to overwrite.
  async_.start(dir, training_state(), writer, shard_file(), std::move(groups), {}, keep, recipe_text, world);
}

size_t TrainLoop::checkpoint_file_bytes() {
  if (dp_.rank() != 0) return 0;
  return trainer::shard_bytes({{"param", pieces(0, false)}, {"adam_m", pieces(1, false)}, {"adam_v", pieces(2, false)}});
}

void TrainLoop::load_checkpoint(const std::string& step_dir) {
  const TrainingState st = read_manifest(step_dir, true);
  if (st.samples % r_.training.global_batch != 0 && st.step > 0)
    throw CheckpointError(step_dir + ": its data cursor (" + std::to_string(st.samples) +
                          " samples) is not a whole number of global batches of " +
                          std::to_string(r_.training.global_batch));
  load_pieces(step_dir, "param", pieces(0, true));
  load_pieces(step_dir, "adam_m", pieces(1, true));
  load_pieces(step_dir, "adam_v", pieces(2, true));
  for (auto& o : opts_) o->set_steps_taken(st.adam_steps);
  step_ = st.step;
  make_loader(st.samples);
}

long TrainLoop::rollback(const std::string& step_dir) {
  const uint64_t here = loader_->cursor();
  load_checkpoint(step_dir);
  const uint64_t there = loader_->cursor();
  make_loader(here);
  return (long)((here - there) / r_.training.global_batch);
}

double StepStats::comm_ms() const {
  double t = 0;
  for (const CommCounters* c : {&comm_dp, &comm_tp, &comm_pp})
    for (int k = 0; k < CommCounters::kKinds; k++) t += c->ms[k];
  return t;
}

TrainLoop::~TrainLoop() {
  for (auto& [key, buf] : messages_) be_.free(buf);
}

float* TrainLoop::message_buffer(int kind, int mb, int chunk) {
  float*& buf = messages_[{kind, mb, chunk}];
  if (!buf) buf = be_.alloc(chunks_[chunk]->boundary_floats(), Mem::Comm);
  return buf;
}

int TrainLoop::take_slot(int chunk, int mb) {
  const int s = free_slots_[chunk].back();
  free_slots_[chunk].pop_back();
  slot_of_mb_[chunk][mb] = s;
  return s;
}

// Walks this stage's schedule once: the micro-batches of one optimizer step.
// Receives are posted one compute action ahead so they overlap it; sends are
// non-blocking and completed before their buffer is reused.
void TrainLoop::run_schedule(float grad_scale, double* loss_sum, StepStats* st) {
  const int v = pipe_.virtual_stages;
  std::map<int, Batch> batches;
  int loaded = 0;
  auto batch = [&](int mb) -> Batch& {  // micro-batches are first needed in order
    while (loaded <= mb) {
      const auto t0 = Clock::now();
      batches[loaded++] = loader_->next();
      st->data_wait_ms += ms_since(t0);
      if (corrupt_)
        for (int32_t& t : batches[loaded - 1].targets) t = (t + r_.model.vocab_size / 2) % r_.model.vocab_size;
    }
    return batches[mb];
  };
  std::map<std::tuple<int, int, int>, Communicator::Request> recvs, act_sends;
  std::vector<Communicator::Request> grad_sends;
  auto post_recv = [&](const PipeAction& a) {
    const int kind = a.op == PipeOp::RecvAct ? kAct : kGrad;
    const auto key = std::make_tuple(kind, a.mb, a.chunk);
    if (recvs.count(key)) return;
    const PipePeer peer = kind == kAct ? prev_in_pipeline(pipe_, stage_, a.chunk)
                                       : next_in_pipeline(pipe_, stage_, a.chunk);
    recvs[key] = pp_->irecv(message_buffer(kind, a.mb, a.chunk), chunks_[a.chunk]->boundary_floats(),
                            peer.stage, tag(kind, a.mb, a.chunk, v));
  };
  // Before compute action i runs, post the receives the next compute action
  // waits for, so they arrive while this one computes.
  auto post_ahead = [&](size_t i) {
    for (size_t j = i + 1; j < schedule_.size(); j++) {
      const PipeOp op = schedule_[j].op;
      if (op == PipeOp::Forward || op == PipeOp::Backward) return;
      if (op == PipeOp::RecvAct || op == PipeOp::RecvGrad) post_recv(schedule_[j]);
    }
  };
  int in_flight = 0;
  for (size_t i = 0; i < schedule_.size(); i++) {
    const PipeAction& a = schedule_[i];
    Transformer& m = *chunks_[a.chunk];
    switch (a.op) {
      case PipeOp::RecvAct:
      case PipeOp::RecvGrad: {
        post_recv(a);
        const auto key = std::make_tuple(a.op == PipeOp::RecvAct ? kAct : kGrad, a.mb, a.chunk);
        const auto t0 = Clock::now();
        pp_->wait(recvs[key]);
        st->pipe_wait_ms += ms_since(t0);
        recvs.erase(key);
        break;
      }
      case PipeOp::Forward: {
        const bool embed = m.chunk().embed, head = m.chunk().head;
        const int32_t* inputs = embed ? batch(a.mb).inputs.data() : nullptr;
        const int32_t* targets = head ? batch(a.mb).targets.data() : nullptr;
        if (pp_) post_ahead(i);
        const int slot = take_slot(a.chunk, a.mb);
        in_flight++;
        st->peak_in_flight = std::max(st->peak_in_flight, in_flight);
        const auto t0 = Clock::now();
        const double loss = m.forward(slot, inputs, targets,
                                      embed ? nullptr : message_buffer(kAct, a.mb, a.chunk), grad_scale);
        st->compute_ms += ms_since(t0);
        if (head) *loss_sum += loss;
        break;
      }
      case PipeOp::SendAct: {
        const PipePeer peer = next_in_pipeline(pipe_, stage_, a.chunk);
        act_sends[{kAct, a.mb, a.chunk}] =
            pp_->isend(m.output(slot_of_mb_[a.chunk][a.mb]), m.boundary_floats(), peer.stage,
                       tag(kAct, a.mb, peer.chunk, v));
        break;
      }
      case PipeOp::Backward: {
        if (pp_) post_ahead(i);
        const int slot = slot_of_mb_[a.chunk][a.mb];
        const auto t0 = Clock::now();
        m.backward(slot, m.chunk().head ? nullptr : message_buffer(kGrad, a.mb, a.chunk));
        st->compute_ms += ms_since(t0);
        // The slot's output may still be in a send: complete it before reuse.
        const auto it = act_sends.find({kAct, a.mb, a.chunk});
        if (it != act_sends.end()) {
          pp_->wait(it->second);
          act_sends.erase(it);
        }
        free_slots_[a.chunk].push_back(slot);
        slot_of_mb_[a.chunk].erase(a.mb);
        in_flight--;
        break;
      }
      case PipeOp::SendGrad: {
        const PipePeer peer = prev_in_pipeline(pipe_, stage_, a.chunk);
        float* buf = message_buffer(kGradOut, a.mb, a.chunk);
        be_.copy(buf, m.input_grad(), m.boundary_floats());
        grad_sends.push_back(pp_->isend(buf, m.boundary_floats(), peer.stage, tag(kGrad, a.mb, peer.chunk, v)));
        break;
      }
    }
  }
  for (auto r : grad_sends) pp_->wait(r);
  for (auto& [key, r] : act_sends) pp_->wait(r);
}

double TrainLoop::compute_gradients(StepStats* stats) {
  StepStats local;
  StepStats& st = stats ? *stats : local;
  const int accum = r_.accum_steps();
  const int tokens_per_micro = r_.training.micro_batch * r_.model.seq_len;
  // Each token's loss gradient is pre-scaled so that summing over micro-batches
  // and DP ranks yields the gradient of the mean loss over the global batch.
  const float grad_scale = 1.0f / ((float)tokens_per_micro * accum * dp_.size());
  for (auto& m : chunks_) be_.zero(m->grads(), m->num_params());
  if (extra_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(extra_ms_));
  double loss_sum = 0;
  const auto t_sched = Clock::now();
  run_schedule(grad_scale, &loss_sum, &st);
  st.span_ms = ms_since(t_sched);
  for (auto& m : chunks_) m->reduce_sequence_parallel_grads();
  // A tied embedding's copies on the first and last stage get the sum of
  // both gradients, so they stay identical.
  if (r_.model.tie_embeddings && embed_ && embed_->size() > 1) {
    for (auto& m : chunks_) {
      if (!(m->chunk().embed || m->chunk().head)) continue;
      const ParamInfo& p = m->registry().at("embed.tok");
      embed_->allreduce_sum(m->grads() + p.offset, p.numel);
    }
  }
  if (poison_) {
    chunks_.front()->grads()[0] = std::numeric_limits<float>::quiet_NaN();
    poison_ = false;
  }
  for (auto& m : chunks_) dp_.allreduce_sum(m->grads(), m->num_params());
  double loss = loss_sum / accum;  // nonzero on the last stage only
  dp_.allreduce_sum(&loss, 1);
  dp_.allreduce_max(&st.data_wait_ms, 1);
  if (pp_) {
    pp_->allreduce_sum(&loss, 1);
    pp_->allreduce_max(&st.data_wait_ms, 1);
  }
  return loss / dp_.size();
}

double TrainLoop::grad_sumsq() {
  double s = 0;
  for (auto& m : chunks_) s += m->grad_sumsq();
  if (pp_) pp_->allreduce_sum(&s, 1);
  return s;
}

StepStats TrainLoop::step() {
  const auto t0 = Clock::now();
  dp_.counters().reset();
  if (tp_) tp_->counters().reset();
  if (pp_) pp_->counters().reset();
  StepStats s;
  s.loss = compute_gradients(&s);
  s.grad_norm = std::sqrt(grad_sumsq());
  s.lr = lr_at(r_.lr, step_, r_.training.steps);
  // Every rank sees the same loss and norm (both are reduced over all
  // groups), and the caller gives every rank the same limit, so all skip
  // together.
  s.nonfinite = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  s.spike = !s.nonfinite && s.loss > loss_limit_;
  corrupt_ = false;
  const float clip = clip_coefficient(s.grad_norm, r_.training.grad_clip);
  if (!s.nonfinite && !s.spike)
    for (size_t c = 0; c < chunks_.size(); c++)
      opts_[c]->step(chunks_[c]->params(), chunks_[c]->grads(), (float)s.lr, clip);
  s.step = ++step_;
  be_.synchronize();  // the step's work is done before its time is read
  s.step_ms = ms_since(t0);
  s.memory = be_.memory();
  s.comm_dp = dp_.counters();
  if (tp_) s.comm_tp = tp_->counters();
  if (pp_) s.comm_pp = pp_->counters();
  const float mine[4] = {(float)s.compute_ms, (float)s.pipe_wait_ms, (float)s.span_ms,
                         (float)s.peak_in_flight};
  std::vector<float> all(4 * pipe_.stages);
  if (pp_) pp_->allgather(mine, all.data(), 4);
  else std::copy(mine, mine + 4, all.begin());
  for (int st = 0; st < pipe_.stages; st++) {
    s.stage_compute_ms.push_back(all[4 * st]);
    s.stage_wait_ms.push_back(all[4 * st + 1]);
    s.stage_span_ms.push_back(all[4 * st + 2]);
    s.stage_peak_in_flight.push_back(all[4 * st + 3]);
  }
  return s;
}

// Forward only, one micro-batch at a time through the virtual pipeline.
double TrainLoop::evaluate() {
  if (!val_) return 0;
  LoaderConfig lc;
  lc.micro_batch = r_.training.micro_batch;
  lc.global_batch = r_.training.eval_batches * lc.micro_batch * dp_.size();
  lc.dp_rank = dp_.rank();
  lc.dp_size = dp_.size();
  lc.prefetch = 0;
  lc.shuffle = false;  // the same validation samples every time
  Loader ld(*val_, lc);
  const int P = pipe_.stages, v = pipe_.virtual_stages;
  double sum = 0;
  for (int k = 0; k < r_.training.eval_batches; k++) {
    Batch b = ld.next();
    for (int vs = 0; vs < P * v; vs++) {
      if (vs % P != stage_) continue;
      const int c = vs / P;
      Transformer& m = *chunks_[c];
      const float* in = nullptr;
      if (vs > 0) {
        float* buf = message_buffer(kAct, 0, c);
        pp_->wait(pp_->irecv(buf, m.boundary_floats(), (vs - 1) % P, tag(kAct, 0, c, v)));
        in = buf;
      }
      const double loss = m.forward(0, b.inputs.data(), b.targets.data(), in, 0.f);
      if (m.chunk().head) sum += loss;
      if (vs + 1 < P * v)
        pp_->wait(pp_->isend(m.output(0), m.boundary_floats(), (vs + 1) % P,
                             tag(kAct, 0, (vs + 1) / P, v)));
    }
  }
  sum /= r_.training.eval_batches;
  dp_.allreduce_sum(&sum, 1);
  if (pp_) pp_->allreduce_sum(&sum, 1);
  return sum / dp_.size();
}

}  // namespace trainer
