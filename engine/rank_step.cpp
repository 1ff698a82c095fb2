#include "engine/rank_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ckpt/hf_import.h"
#include "data/dataset.h"
#include "engine/layout.h"
#include "model/init.h"
#include "model/lr_schedule.h"
#include "parallel/process_grid.h"
#include "parallel/context_attention.h"
#include "runtime/elapsed.h"
#include "runtime/errors.h"
#include "runtime/units.h"

namespace trainer {

namespace {
std::unique_ptr<CountingDataComm> counted(DataComm* c) {
  return c && c->size() > 1 ? std::make_unique<CountingDataComm>(*c) : nullptr;
}
}  // namespace

ParallelGroups groups_of(ProcessGrid& g) {
  using G = ProcessGrid;
  ParallelGroups p;
  for (const GridDim& d : kGridDims) {
    const G::Group group = grid_dim(d.name) == grid_dim("dp") ? G::Replicas : G::of(d.name);
    p[d.name] = {&g.data(group), &g.control(group)};
  }
  p.embed = &g.data(G::Embed);
  if (g.has(G::Experts)) p.ep = {&g.data(G::Experts), &g.control(G::Experts)};
  p.edp = {&g.data(G::ExpertReplicas), &g.control(G::ExpertReplicas)};
  return p;
}

RankStep::RankStep(Backend& be, ParallelGroups groups, const Recipe& r, Blend train, Blend val)
    : be_(be), replicas_(*groups["dp"].data), tp_(counted(groups["tp"].data)), pp_(counted(groups["pp"].data)),
      cp_(counted(groups["cp"].data)), replicas_control_(groups["dp"].control),
      pp_control_(pp_ ? groups["pp"].control : nullptr),
      tp_control_(tp_ ? groups["tp"].control : nullptr), cp_control_(cp_ ? groups["cp"].control : nullptr),
      ep_(counted(groups.ep.data)), ep_control_(ep_ ? groups.ep.control : nullptr),
      edp_(groups.edp.data ? groups.edp.data : groups["dp"].data), embed_(groups.embed),
      r_(r), train_(std::move(train)), val_(std::move(val)) {
  pipe_ = r.pipeline();
  if ((pp_ ? pp_->size() : 1) != pipe_.stages) throw std::invalid_argument("pp group size differs from the recipe");
  if ((cp_ ? cp_->size() : 1) != r.parallel.grid.cp || replicas_.size() != r.parallel.grid.weight_replicas())
    throw std::invalid_argument("cp or weight-replica group size differs from the recipe");
  if ((ep_ ? ep_->size() : 1) != r.parallel.grid.ep || edp_->size() != r.parallel.grid.expert_replicas())
    throw std::invalid_argument("ep or expert-replica group size differs from the recipe");
  if (ep_ && edp_->size() > 1) edp_counted_ = std::make_unique<CountingDataComm>(*edp_), edp_ = edp_counted_.get();
  if (const std::string why = check_pipeline(pipe_); !why.empty()) throw std::invalid_argument(why);
  stage_ = pp_ ? pp_->rank() : 0;
  std::vector<float> host;
  zero_ = r.parallel.zero_sharded() ? r.parallel.zero_stage : 0;
  layout_ = rank_layout(r, stage_);
  for (const ChunkLayout& ch : layout_.chunks) {
    chunks_.push_back(
        std::make_unique<Transformer>(be, r.model, layout_, ch, TensorParallel{tp_.get(), tp_control_}, r.recompute,
                                      ContextParallel{cp_.get(), cp_control_}, ExpertParallel{ep_.get(), ep_control_}));
    Transformer& m = *chunks_.back();
    m.keep_losses_on_device(true);  // read once per step, with the gradient norm
    opts_.push_back(std::make_unique<AdamW>(
        be, m.registry(), r.adamw, ReplicaReduction::owned_ranges(zero_, m, replicas_, ep_ ? edp_ : nullptr)));
  }
  if (zero_ == 3) unit_weights_ = std::make_unique<UnitWeights>(be, chunks_, replicas_, layout_.reshard_after_forward,
                                                                layout_.zero_prefetch);
  for (size_t c = 0; c < chunks_.size(); c++) {
    // Every replica and layout draws the same initial weights from the run
    // seed (ZeRO-3: this rank keeps its slices).
    Transformer& m = *chunks_[c];
    host.assign(m.num_params(), 0.f);
    init_params(m.layout(), r.model, r.run.seed, host.data());
    if (unit_weights_) {
      for (const OwnedRange& o : unit_weights_->owned(c))
        be_.from_host(unit_weights_->master(c).ref(o.local), host.data() + o.lo, o.hi - o.lo);
    } else {
      be_.from_host(m.params().ref(), host.data(), host.size());
      m.sync_compute_weights();
    }
  }
  executor_ = std::make_unique<PipelineExecutor>(be, pipe_, stage_, pp_.get(), chunks_);
  reduction_ = std::make_unique<ReplicaReduction>(be, chunks_, replicas_, embed_, *edp_, r, zero_, *executor_);
  if (unit_weights_) unit_weights_->lend();
  sum_spans_ = reduction_->sum_spans();  // once: the buffers never move
  // Writers: each position's first replica, and under expert parallelism
  // the first of those holding each other part of the experts (ZeRO: all).
  const bool writer = replicas_.rank() == 0 || zero_ || (ep_ && edp_->rank() == 0);
  staging_ = std::make_unique<CheckpointStaging>(be, chunks_, opts_, stage_, tp_ ? tp_->rank() : 0, writer,
                                                 r.checkpoint.saves(), zero_ ? &replicas_ : nullptr,
                                                 unit_weights_.get(), ep_ ? ep_->rank() : 0);
  make_loader(0);
}

RankStep::~RankStep() = default;

LoaderConfig RankStep::data_parallel_reads() const {
  LoaderConfig lc;
  lc.dp_rank = replicas_.rank() / r_.parallel.grid.cp;
  lc.dp_size = r_.parallel.grid.dp;
  return lc;
}

void RankStep::make_loader(uint64_t start_position) {
  LoaderConfig lc = data_parallel_reads();
  lc.micro_batch = layout_.micro_batch;
  lc.micro_batches = pipe_.micro_batches;
  lc.prefetch = r_.data.prefetch;
  lc.seed = r_.run.seed;
  lc.start_position = start_position;
  loader_.reset();  // stop the old prefetch thread first
  cursor_ = start_position;
  const bool reads_data = std::any_of(chunks_.begin(), chunks_.end(),
                                      [](const auto& m) { return m->chunk().embed || m->chunk().head; });
  if (reads_data) loader_ = std::make_unique<Loader>(train_, lc);
}

TrainingState RankStep::training_state() const {
  TrainingState st;
  st.step = step_;
  st.samples = cursor_;
  st.adam_steps = opts_.front()->steps_taken();
  st.dp = r_.parallel.grid.dp, st.pp = pipe_.stages, st.tp = tp_ ? tp_->size() : 1;
  return st;
}

std::string RankStep::save_checkpoint(const std::string& dir, int keep, ControlComm& world,
                                       const std::string& recipe_text,
                                       const std::function<void(const char*)>& at_point) {
  return staging_->save(dir, training_state(), keep, world, recipe_text, at_point);
}

void RankStep::start_async_save(const std::string& dir, int keep, ControlComm& world,
                                 const std::string& recipe_text) {
  staging_->start_async(dir, training_state(), keep, world, recipe_text);
}

size_t RankStep::checkpoint_file_bytes() { return staging_->file_bytes(); }

void RankStep::load_checkpoint(const std::string& step_dir) {
  const TrainingState st = read_manifest(step_dir, true);
  if (st.samples % r_.training.global_batch != 0 && st.step > 0)
    throw CheckpointError(step_dir + ": its data cursor (" + std::to_string(st.samples) +
                          " samples) is not a whole number of global batches of " +
                          std::to_string(r_.training.global_batch));
  staging_->load(step_dir);
  for (auto& m : chunks_) m->sync_compute_weights();
  for (auto& o : opts_) o->set_steps_taken(st.adam_steps);
  step_ = st.step;
  make_loader(st.samples);
}

void RankStep::init_from_hf(const std::string& dir, const TextEnds& data_ends) {
  staging_->load_params(import_hf_dir(dir, r_.model, data_ends), dir);
  for (auto& m : chunks_) m->sync_compute_weights();
}

long RankStep::rollback(const std::string& step_dir) {
  const uint64_t here = cursor_;
  load_checkpoint(step_dir);
  const uint64_t there = cursor_;
  make_loader(here);
  return (long)((here - there) / r_.training.global_batch);
}

double StepStats::comm_ms() const {
  double t = 0;
  for (const CommCounters& c : comm)
    for (int k = 0; k < CommCounters::kKinds; k++) t += c.ms[k];
  for (int k = 0; k < CommCounters::kKinds; k++) t += comm_ep.ms[k];
  return t;
}

// Micro-batches are first needed in order; the wait on the loader is timed.
const Batch& RankStep::next_batch(std::map<int, Batch>& batches, int mb, double* wait_ms) {
  while ((int)batches.size() <= mb) {
    const int k = (int)batches.size();
    const auto t0 = Clock::now();
    Batch& b = batches[k] = loader_->next();
    *wait_ms += ms_since(t0);
    if (corrupt_)
      for (int32_t& t : b.targets) t = (t + r_.model.vocab_size / 2) % r_.model.vocab_size;
  }
  return batches[mb];
}

void RankStep::compute_gradients(StepStats* stats) {
  StepStats local;
  StepStats& st = stats ? *stats : local;
  const int accum = pipe_.micro_batches;
  const int tokens_per_micro = chunks_.front()->tokens();  // this rank's: 1/cp of each sequence
  // Each token's loss gradient is pre-scaled so that summing over micro-batches
  // and dp x cp ranks yields the gradient of the mean loss over the global batch.
  const float grad_scale = 1.0f / ((float)tokens_per_micro * accum * replicas_.size());
  for (auto& m : chunks_) {
    if (m->grads()) be_.zero(m->grads().ref(), m->num_params());
    m->reset_step_losses();
  }
  if (unit_weights_) unit_weights_->invalidate(), unit_weights_->reset_exposed();  // changed since gathered
  if (extra_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(extra_ms_));
  std::map<int, Batch> batches;
  ScheduleTimes times;
  // A NaN fault enters after the backward: nothing may be in flight then.
  reduction_->begin_step(!poison_);
  const auto t_sched = Clock::now();
  executor_->run_step(
      [&](int mb) -> const Batch& { return next_batch(batches, mb, &st.data_wait_ms); }, grad_scale, &times);
  st.span_ms = ms_since(t_sched);
  st.compute_ms = times.compute_ms, st.pipe_wait_ms = times.pipe_wait_ms;
  st.peak_in_flight = times.peak_in_flight;
  // Fault injection: a NaN enters this rank's gradients.
  std::function<void(Ref)> poison;
  if (poison_)
    poison = [this](Ref at) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      be_.from_host(at, &nan, 1);
      poison_ = false;
    };
  reduction_->finish(poison);
  st.dp_exposed_ms = reduction_->exposed_ms(), st.dp_span_ms = reduction_->span_ms();
  if (unit_weights_) st.dp_exposed_ms += unit_weights_->exposed_ms();  // ZeRO-3: waits on gathers too
  replicas_control_->allreduce_max(&st.data_wait_ms, 1);
  if (pp_control_) pp_control_->allreduce_max(&st.data_wait_ms, 1);
  cursor_ += r_.training.global_batch;
}

StepSums RankStep::read_sums() {
  return read_step_sums(be_, sum_spans_, reduction_->sums_sharded() ? replicas_control_ : nullptr, tp_control_,
                        pp_control_, ep_control_);
}

double RankStep::grad_sumsq() { return read_sums().grad_sumsq; }

Buffer& RankStep::master_weights(size_t c) {
  return unit_weights_ ? unit_weights_->master(c) : chunks_[c]->params();
}

void RankStep::poison_weights() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  be_.from_host(master_weights(0).ref(), &nan, 1);
}

bool RankStep::weights_finite() {
  double s = 0;  // a NaN or inf weight makes the sum of squares NaN or inf
  for (size_t c = 0; c < chunks_.size(); c++) s += be_.sumsq(master_weights(c).ref(0).f32(), master_weights(c).count());
  return std::isfinite(s);
}

// The mean loss over the global batch from this rank's summed per-token
// losses (nonzero on the last stage only): the same value on every rank.
// Every rank of dp x cp holds as many tokens.
double RankStep::mean_loss(double loss_sum) {
  const int tokens_per_micro = chunks_.front()->tokens();
  double loss = loss_sum / ((double)tokens_per_micro * pipe_.micro_batches);
  replicas_control_->allreduce_sum(&loss, 1);
  if (pp_control_) pp_control_->allreduce_sum(&loss, 1);
  return loss / replicas_.size();
}

StepStats RankStep::step() {
  const auto t0 = Clock::now();
  replicas_.counters().reset();
  if (tp_) tp_->counters().reset();
  if (pp_) pp_->counters().reset();
  if (cp_) cp_->counters().reset();
  if (ep_) ep_->counters().reset();
  if (edp_counted_) edp_counted_->counters().reset();
  for (auto& m : chunks_) m->reset_cp_times();
  StepStats s;
  const uint64_t syncs0 = be_.host_syncs();
  compute_gradients(&s);
  const StepSums sums = read_sums();  // the step's one read before the update
  s.loss = mean_loss(sums.loss_sum);
  if (r_.model.moe.enabled()) record_moe_losses(s);
  s.grad_norm = std::sqrt(sums.grad_sumsq);
  s.lr = lr_at(r_.lr, step_, r_.training.steps);
  // Every rank sees the same loss and norm (both are reduced over all
  // groups), and the caller gives every rank the same limit, so all skip
  // together.
  s.nonfinite = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  s.spike = !s.nonfinite && s.loss > loss_limit_;
  corrupt_ = false;
  const float clip = clip_coefficient(s.grad_norm, r_.training.grad_clip);
  if (!s.nonfinite && !s.spike) {
    for (size_t c = 0; c < chunks_.size(); c++)
      opts_[c]->step(master_weights(c), reduction_->grads(c), (float)s.lr, clip, chunks_[c]->compute_copy(),
                     reduction_->packed(unit_weights_ != nullptr));
    s.dp_exposed_ms += reduction_->gather_weights();  // (ZeRO-3 gathers each unit when it is used)
    // Every rank holding a router moves its bias alike (from the step's
    // global loads), in the master weights, which AdamW leaves as they are
    // there (no gradient, no decay): the same on every rank under ZeRO-1 too.
    if (r_.model.moe.bias_rate > 0)
      for (auto& m : chunks_) m->nudge_router_bias(s.moe_selections, r_.model.moe.bias_rate);
  }
  s.step = ++step_;
  be_.synchronize();  // the step's work is done before its time is read
  s.step_ms = ms_since(t0);
  s.host_syncs = be_.host_syncs() - syncs0;
  s.memory = be_.memory();
  // (the places resolved at compile time: nothing looked up in the step)
  static constexpr int dp = known_grid_dim("dp"), tp = known_grid_dim("tp"), pp = known_grid_dim("pp"),
                       cp = known_grid_dim("cp");
  s.comm[dp] = replicas_.counters();
  if (tp_) s.comm[tp] = tp_->counters();
  if (pp_) s.comm[pp] = pp_->counters();
  if (cp_) s.comm[cp] = cp_->counters();
  for (CountingDataComm* c : {ep_.get(), edp_counted_.get()})
    for (int k = 0; c && k < CommCounters::kKinds; k++)
      s.comm_ep.bytes[k] += c->counters().bytes[k], s.comm_ep.ms[k] += c->counters().ms[k],
          s.comm_ep.calls[k] += c->counters().calls[k];
  record_stage_times(s);
  record_cp_times(s);
  return s;
}

// The routers' losses and the experts' selections, summed by each chunk's
// backward on the host, over every rank's rows (the replicas', tp's) and
// layers (the stages').
void RankStep::record_moe_losses(StepStats& s) {
  const int E = r_.model.moe.experts, L = r_.model.n_layers;
  // per layer: the selections [L x E], the dropped pairs, aux, z [L each]
  std::vector<double> sums((size_t)L * (E + 3), 0.0);
  double* selections = sums.data();
  double *dropped = selections + (size_t)L * E, *aux = dropped + L, *z = aux + L;
  for (auto& m : chunks_)
    for (size_t i = 0; i < m->moe_step_sums().size(); i++) {
      const RouterStepSums& rs = m->moe_step_sums()[i];
      const size_t l = m->chunk().first_layer + i;
      dropped[l] += rs.dropped, aux[l] += rs.losses.aux, z[l] += rs.losses.z;
      s.moe_expert_rows += rs.expert_rows;
      for (size_t e = 0; e < rs.selections.size(); e++) selections[l * E + e] += rs.selections[e];
    }
  // (Each rank's rows are its own: tp's under sequence parallelism, which
  // [moe] needs with tp > 1.)
  replicas_control_->allreduce_sum(sums.data(), sums.size());
  if (tp_control_) tp_control_->allreduce_sum(sums.data(), sums.size());
  if (pp_control_) pp_control_->allreduce_sum(sums.data(), sums.size());
  const double tokens = (double)chunks_.front()->tokens() * pipe_.micro_batches * replicas_.size();
  s.moe = true, s.moe_aux_loss = s.moe_z_loss = 0;  // (moe_expert_rows: this rank's, above)
  s.moe_selections.assign(selections, selections + (size_t)L * E);
  s.moe_dropped.assign(dropped, dropped + L), s.moe_layer_aux.assign(aux, aux + L), s.moe_layer_z.assign(z, z + L);
  for (int l = 0; l < L; l++) {
    s.moe_dropped[l] /= tokens * r_.model.moe.top_k, s.moe_layer_aux[l] /= tokens, s.moe_layer_z[l] /= tokens;
    s.moe_aux_loss += s.moe_layer_aux[l], s.moe_z_loss += s.moe_layer_z[l];
  }
}

// Every stage's compute, wait, span and peak in flight, in stage order.
void RankStep::record_stage_times(StepStats& s) {
  const float mine[4] = {(float)s.compute_ms, (float)s.pipe_wait_ms, (float)s.span_ms,
                         (float)s.peak_in_flight};
  std::vector<float> all(4 * pipe_.stages);
  if (pp_control_) pp_control_->allgather(mine, all.data(), 4);
  else std::copy(mine, mine + 4, all.begin());
  for (int st = 0; st < pipe_.stages; st++) {
    s.stage_compute_ms.push_back(all[4 * st]);
    s.stage_wait_ms.push_back(all[4 * st + 1]);
    s.stage_span_ms.push_back(all[4 * st + 2]);
    s.stage_peak_in_flight.push_back(all[4 * st + 3]);
  }
}

void RankStep::record_cp_times(StepStats& s) {
  if (!cp_control_) return;
  CpTimes t;
  for (auto& m : chunks_) t += *m->cp_times();
  s.cut_sequences = true, s.cp_exposed_ms = t.exposed_ms;
  // One control call: every cp rank's attention compute, the slowest against the mean.
  const float mine = (float)t.compute_ms;
  std::vector<float> all(cp_->size());
  cp_control_->allgather(&mine, all.data(), 1);
  const double mean = std::accumulate(all.begin(), all.end(), 0.0) / all.size();
  const double slowest = *std::max_element(all.begin(), all.end());
  s.cp_imbalance = mean > 0 ? slowest / mean - 1 : 0;
}

// Forward only, one micro-batch at a time through the virtual pipeline.
RankStep::Evaluation RankStep::evaluate() {
  Evaluation ev;
  if (val_.sources().empty()) return ev;
  const std::vector<double> shares = val_.shares();
  ev.overall = 0;
  const size_t reads = (size_t)r_.training.eval_batches * layout_.micro_batch * r_.parallel.grid.dp;
  for (size_t j = 0; j < val_.sources().size(); j++) {
    const BlendSource& s = val_.sources()[j];
    const double loss = evaluate(*s.data);
    ev.overall += shares[j] * loss;
    if (!s.name.empty()) ev.sources.emplace_back(s.name, loss);
    const size_t held = s.data->num_samples();
    ev.windows += std::min(reads, held);
    if (held < reads) ev.short_sources.emplace_back(s.name.empty() ? "data.val" : s.name, held, reads);
  }
  return ev;
}

double RankStep::evaluate(const TokenDataset& data) {
  if (unit_weights_) unit_weights_->invalidate();  // updated since they were last gathered
  LoaderConfig lc = data_parallel_reads();
  lc.micro_batch = layout_.micro_batch;
  lc.micro_batches = r_.training.eval_batches;
  lc.prefetch = 0;
  lc.shuffle = false;  // the same validation samples every time
  Loader ld(data, lc);
  double sum = 0;
  for (int k = 0; k < r_.training.eval_batches; k++) sum += executor_->forward_only(ld.next());
  sum /= r_.training.eval_batches;
  replicas_control_->allreduce_sum(&sum, 1);
  if (pp_control_) pp_control_->allreduce_sum(&sum, 1);
  return sum / replicas_.size();
}

}  // namespace trainer
