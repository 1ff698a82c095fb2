#include "engine/throughput_bench.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "model/adamw.h"
#include "model/flops.h"
#include "model/init.h"
#include "model/transformer.h"
#include "runtime/elapsed.h"
#include "runtime/metrics.h"
#include "runtime/rng.h"
#include "engine/layout.h"

namespace trainer {

namespace {

struct Runner {
  std::unique_ptr<Backend> be;
  std::unique_ptr<Transformer> model;
  std::unique_ptr<AdamW> opt;
  BenchRun out;
};

Runner make_runner(const Recipe& r, const RankLayout& layout, RecomputeMode m, std::unique_ptr<Backend> be) {
  Runner rn;
  rn.be = std::move(be);
  rn.be->reset_memory_peaks();
  rn.model = std::make_unique<Transformer>(*rn.be, r.model, layout, layout.chunks.front(), TensorParallel{},
                                           RecomputeConfig{m, r.recompute.layers});
  rn.opt = std::make_unique<AdamW>(*rn.be, rn.model->registry(), r.adamw);
  std::vector<float> host(rn.model->num_params());
  init_params(rn.model->layout(), r.model, r.run.seed, host.data());
  rn.be->from_host(rn.model->params().ref(), host.data(), host.size());
  rn.model->sync_compute_weights();
  rn.model->keep_losses_on_device(true);  // as training does: one read per step
  rn.out.mode = m;
  rn.out.params = rn.model->num_params();
  rn.out.micro_batch = layout.micro_batch;
  return rn;
}

// Process CPU time (all threads): it does not count time the shared host
// takes the cores away.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// One training step as RankStep runs it: the loss stays on the device and
// is read with the gradient norm in one call, then AdamW. The forward
// phase's end is the bench's own synchronisation (to time the phases); the
// step's host waits are counted without it.
void one_step(Runner& rn, const Recipe& r, const std::vector<int32_t>& tokens, bool timed) {
  Transformer& model = *rn.model;
  Backend& be = *rn.be;
  const int BT = model.micro_batch() * r.model.seq_len;
  const auto t0 = Clock::now();
  const double c0 = cpu_ms();
  const uint64_t syncs0 = be.host_syncs();
  model.reset_step_losses();
  model.forward(tokens.data(), tokens.data() + 1, 1.0f / BT);
  be.synchronize();  // the bench's: where the forward phase ends
  const auto t1 = Clock::now();
  model.backward();
  double sums[3];
  be.sumsq_groups(model.step_sum_spans(0, model.num_params()), sums, 3);  // waits for the backward: its phase ends here
  const auto t2 = Clock::now();
  const double norm = std::sqrt(sums[0] + sums[1]);
  rn.opt->step(model.params(), model.grads(), r.lr.lr, clip_coefficient(norm, r.training.grad_clip),
               model.compute_copy());
  be.zero(model.grads().ref(), model.num_params());
  be.synchronize();
  const auto t3 = Clock::now();
  rn.out.loss = sums[2] / BT;
  if (!timed) return;
  rn.out.wall_ms.push_back(ms_between(t0, t3));
  rn.out.cpu_ms.push_back(cpu_ms() - c0);
  rn.out.phase_ms[0].push_back(ms_between(t0, t1));
  rn.out.phase_ms[1].push_back(ms_between(t1, t2));
  rn.out.phase_ms[2].push_back(ms_between(t2, t3));
  rn.out.host_syncs.push_back((double)(be.host_syncs() - syncs0 - 1));
}

}  // namespace

std::vector<BenchRun> bench_training(const Recipe& r, const std::vector<RecomputeMode>& modes, int steps,
                                     int warmup, const BackendOptions& options, std::unique_ptr<Backend>& first) {
  const RankLayout layout = rank_layout(r, 0);  // one process, the whole model
  const int BT = layout.micro_batch * r.model.seq_len;
  std::vector<int32_t> tokens(BT + 1);
  Rng rng(r.run.seed, "bench");
  for (auto& t : tokens) t = (int32_t)rng.below(r.model.vocab_size);
  std::vector<Runner> runners;
  for (RecomputeMode m : modes)
    runners.push_back(make_runner(r, layout, m, runners.empty() ? std::move(first) : make_backend(options)));
  for (int s = 0; s < warmup + steps; s++)
    for (Runner& rn : runners) one_step(rn, r, tokens, s >= warmup);
  std::vector<BenchRun> out;
  for (Runner& rn : runners) {
    rn.out.memory = rn.be->memory();
    out.push_back(std::move(rn.out));
  }
  first = std::move(runners.front().be);
  return out;
}

BenchFigures bench_figures(const Recipe& r, const BenchRun& run, double peak_gflops) {
  BenchFigures f;
  f.fastest_ms = *std::min_element(run.wall_ms.begin(), run.wall_ms.end());
  f.median_ms = median_of(run.wall_ms), f.median_cpu_ms = median_of(run.cpu_ms);
  for (int k = 0; k < 3; k++) f.median_phase_ms[k] = median_of(run.phase_ms[k]);
  f.host_syncs = median_of(run.host_syncs);
  f.tokens_per_s = (double)run.micro_batch * r.model.seq_len / (f.fastest_ms / 1e3);
  f.model_gflops = train_flops_per_token(r.model) * f.tokens_per_s / 1e9;
  f.mfu_peak_gflops = std::max(peak_gflops, f.model_gflops);
  f.mfu = f.model_gflops / f.mfu_peak_gflops;
  return f;
}

}  // namespace trainer
