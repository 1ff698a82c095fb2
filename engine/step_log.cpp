// What the step loop tells people: the run's header, one metrics.jsonl
// record and one line per logged step, and the summary at the end.
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "engine/step_loop.h"
#include "model/flops.h"
#include "model/param_registry.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/flight_recorder.h"
#include "runtime/metrics_fields.h"
#include "runtime/peak_cache.h"
#include "runtime/units.h"
#include "runtime/utc_time.h"

namespace trainer {

namespace mf = metrics_field;

namespace {

// Per layer the most tokens an expert got and the mean over its experts (a
// dense layer's 0), and the worst layer's max over mean.
struct MoeLoads {
  std::vector<double> max, mean;
  double worst = 0;
};
MoeLoads moe_loads(const StepStats& st, int experts) {
  MoeLoads out;
  for (size_t at = 0; at + experts <= st.moe_selections.size(); at += experts) {
    double mx = 0, sum = 0;
    for (int e = 0; e < experts; e++) mx = std::max(mx, st.moe_selections[at + e]), sum += st.moe_selections[at + e];
    out.max.push_back(mx), out.mean.push_back(sum / experts);
    if (sum > 0) out.worst = std::max(out.worst, mx / (sum / experts));
  }
  return out;
}

// Per pipeline stage and per group and kind of collective (rank 0's view;
// every rank of a group moves the same bytes); peak memory per category.
void add_breakdown(JsonRecord& rec, const StepStats& st, const GridShape& grid) {
  rec.add(mf::kPpComputeMs, st.stage_compute_ms, "stage").add(mf::kPpWaitMs, st.stage_wait_ms, "stage")
      .add(mf::kPpSpanMs, st.stage_span_ms, "stage").add(mf::kPpPeakInFlight, st.stage_peak_in_flight, "stage");
  // The groups a layout names (GridDim::named_at_1), the slowest first.
  each_grid_dim_slowest_first([&](const GridDim& d, GridDims bit) {
    if (!(named_dims(grid) & bit)) return;
    const CommCounters& cc = st.comm_of(d.name);
    for (int k = 0; k < CommCounters::Other; k++) {
      const std::string key = mf::comm_of(d.name, CommCounters::name(k));
      rec.add(key + "bytes", cc.bytes[k]).add(key + "ms", cc.ms[k]);
    }
  });
  for (int k = 0; grid.ep > 1 && k < CommCounters::Other; k++) {  // (expert parallelism: "comm_ep_p2p_...")
    const std::string key = mf::comm_of("ep", CommCounters::name(k));
    rec.add(key + "bytes", st.comm_ep.bytes[k]).add(key + "ms", st.comm_ep.ms[k]);
  }
  for (int k = 0; k < kMemKinds; k++)
    rec.add(mf::mem_peak_of(mem_name((Mem)k)), mib(st.memory.peak[k]));
}

}  // namespace

void StepLoop::print_header() const {
  if (!lead_) return;
  size_t here = 0;
  for (auto& m : rank_step_.chunks()) here += m->num_params();
  const std::string device = job_.backend->device_name();
  // On the CPU, which kernel set runs (the sets agree to the bit; speed differs).
  const std::string precision = std::string(dtype_name(r_.training.precision)) +
                                (device.empty() ? std::string(" on CPU, ") + cpu::kernel_set_name(cpu::kernel_set()) + " kernels"
                                                : " on " + device);
  std::printf(
      "trainer: %s | %s, %s params (%s/rank), %s | %s | global batch %d x %d tokens, "
      "micro-batch %d, %d accumulation step(s) | %zu train samples | peak %.1f GFLOP/s/rank (%s)\n",
      r_.run.name.c_str(), arch_name(r_.model.arch), format_count((double)build_params(r_.model).reg.total()).c_str(),
      format_count((double)here).c_str(), precision.c_str(), r_.layout_summary().c_str(), r_.training.global_batch, r_.model.seq_len, rank_step_.layout().micro_batch, r_.accum_steps(),
      job_.train.num_samples(), job_.peak_gflops, job_.peak_source.c_str());
  std::fflush(stdout);
}

// MFU against the peak (rank 0). A run faster than its peak shows the peak
// is stale (a cached measurement of a busier moment, or a wrong
// runtime.peak_gflops): from then on the run's own rate is the peak, a cached
// entry is dropped so that the next start measures again, and it says so
// once. So MFU never reads above 100%.
double StepLoop::model_flops_utilization(double tokens_per_s) {
  if (job_.peak_gflops <= 0) return 0;
  const double rate = train_flops_per_token(r_.model) * tokens_per_s / 1e9 / world_.size();  // GFLOP/s per rank
  if (rate > job_.peak_gflops && !stale_peak_noted_) {
    stale_peak_noted_ = true;
    const bool cached = !job_.peak_cache_key.empty() && forget_cached_peak(job_.peak_cache_file, job_.peak_cache_key);
    std::fprintf(stderr,
                 "note: this run computes %.1f GFLOP/s per rank, more than the peak MFU was relative to (%.1f, %s): "
                 "that peak is stale; MFU is relative to the run's own rate from here on%s\n",
                 rate, job_.peak_gflops, job_.peak_source.c_str(),
                 cached ? ", and the cached peak is dropped (the next run measures again)" : "");
    job_.peak_source = "this run's rate, above the stale peak";
    job_.peak_cache_key.clear();
  }
  job_.peak_gflops = std::max(job_.peak_gflops, rate);
  return rate / job_.peak_gflops;
}

void StepLoop::log_step(const StepStats& st, const StepExtras& x) {
  const bool log = st.step % r_.training.log_every == 0 || st.step == r_.training.steps || st.step == 1;
  const bool named = x.straggler_report && !x.slow.ranks.empty();  // a quiet report does not force a line
  if (!lead_ || (!log && x.val < 0 && x.ckpt_ms < 0 && !named && !st.nonfinite && !st.spike)) return;
  const double tps = r_.tokens_per_step() / (st.step_ms / 1e3);
  const double mfu = model_flops_utilization(tps);
  JsonRecord rec;
  rec.add(mf::kStep, st.step).add(mf::kLoss, st.loss).add(mf::kLr, st.lr).add(mf::kGradNorm, st.grad_norm)
      .add(mf::kTokensPerS, tps).add(mf::kMfu, mfu).add(mf::kStepMs, st.step_ms).add(mf::kDataWaitMs, st.data_wait_ms)
      .add(mf::kHostSyncs, (long)st.host_syncs)
      .add(mf::kPrecision, std::string(dtype_name(r_.training.precision)))
      .add(mf::kTime, iso_time(wall_seconds()));
  if (st.nonfinite || st.spike) rec.add(mf::kUpdateSkipped, 1);
  if (st.spike) rec.add(mf::kLossSpike, 1);
  if (x.val >= 0) rec.add(mf::kValLoss, x.val), rec.add(mf::kValWindows, (long)x.val_windows);
  for (const auto& [name, loss] : x.val_sources) rec.add(mf::val_loss_of(name), loss);
  add_blend_counts(rec);
  if (x.ckpt_ms >= 0) rec.add(mf::kCkptMs, x.ckpt_ms);
  if (named)
    rec.add(mf::kStragglers, x.slow.ranks).add(mf::kStragglerComputeMs, x.slow.ms)
        .add(mf::kStragglerRatio, x.slow.worst_ratio).add(mf::kComputeMsMedian, x.slow.median_ms);
  if (world_.size() > 1 && r_.parallel.grid.weight_replicas() > 1)
    rec.add(mf::kCommDpExposedMs, st.dp_exposed_ms).add(mf::kCommDpSpanMs, st.dp_span_ms);
  if (st.cut_sequences) rec.add(mf::kCommCpExposedMs, st.cp_exposed_ms).add(mf::kCpImbalance, st.cp_imbalance);
  if (st.moe) {
    const MoeLoads loads = moe_loads(st, r_.model.moe.experts);
    rec.add(mf::kMoeAuxLoss, st.moe_aux_loss).add(mf::kMoeZLoss, st.moe_z_loss);
    rec.add(mf::kMoeTokensMax, loads.max, "layer").add(mf::kMoeTokensMean, loads.mean, "layer");
    rec.add(mf::kMoeDropped, st.moe_dropped, "layer").add(mf::kMoeLayerAuxLoss, st.moe_layer_aux, "layer");
    rec.add(mf::kMoeLayerZLoss, st.moe_layer_z, "layer");
  }
  add_breakdown(rec, st, r_.parallel.grid);
  if (!job_.metrics->write(rec))
    for (const std::string& e : job_.metrics->errors()) run_file_unwritable(e);
  std::printf(
      "step %5ld/%ld | loss %.4f | lr %.2e | grad norm %.3f | %s tok/s | mfu %.1f%% | %.0f ms | data wait %.2f ms",
      st.step, r_.training.steps, st.loss, st.lr, st.grad_norm, format_count(tps).c_str(), 100 * mfu, st.step_ms,
      st.data_wait_ms);
  if (st.moe) std::printf(" | moe aux %.4f z %.4f load %.2fx", st.moe_aux_loss, st.moe_z_loss,
                          moe_loads(st, r_.model.moe.experts).worst);
  if (x.val >= 0) std::printf(" | val loss %.4f", x.val);
  for (size_t i = 0; i < x.val_sources.size(); i++)
    std::printf("%s%s %.4f%s", i ? ", " : " (", x.val_sources[i].first.c_str(), x.val_sources[i].second,
                i + 1 == x.val_sources.size() ? ")" : "");
  std::printf("\n");
  std::fflush(stdout);
}

// A blend's samples so far, per source: the whole stream up to this step's
// end, counted by the same rule the loaders follow.
void StepLoop::add_blend_counts(JsonRecord& rec) {
  if (!job_.train.blended()) return;
  if (!blend_counter_) blend_counter_ = std::make_unique<BlendOrder>(job_.train.shares());
  const std::vector<uint64_t> counts = blend_counter_->counts_before(rank_step_.data_cursor());
  for (size_t j = 0; j < counts.size(); j++) rec.add(mf::samples_of(job_.train.sources()[j].name), (long)counts[j]);
}

void StepLoop::print_blend() const {
  if (!lead_ || !job_.train.blended()) return;
  const std::vector<double> shares = job_.train.shares();
  std::printf("blend:");
  for (size_t j = 0; j < shares.size(); j++) {
    const BlendSource& s = job_.train.sources()[j];
    std::printf("%s %s %.1f%% of samples (%zu samples, an epoch every %.0f steps)", j ? "," : "", s.name.c_str(),
                100 * shares[j], s.data->num_samples(),
                s.data->num_samples() / (shares[j] * r_.training.global_batch));
  }
  std::printf("\n");
}

// Collective: the memory summary is the largest peak of any rank.
void StepLoop::print_summary() {
  double peaks[kMemKinds + 1];
  const MemoryStats& ms = job_.backend->memory();
  for (int k = 0; k < kMemKinds; k++) peaks[k] = (double)ms.peak[k];
  peaks[kMemKinds] = (double)ms.total_peak;
  world_.allreduce_max(peaks, kMemKinds + 1);
  if (!lead_) return;
  std::printf("memory per rank (peak, largest over ranks):");
  for (int k = 0; k < kMemKinds; k++) std::printf(" %s %.1f MB", mem_name((Mem)k), mib(peaks[k]));
  std::printf(" | total %.1f MB\n", mib(peaks[kMemKinds]));
  if (first_ >= r_.training.steps) return;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start_).count();
  if (end_ < r_.training.steps)
    std::printf("stopped after %ld steps (training.exit_after = %ld; %ld of %ld done) in %.1f s | loss %.4f",
                end_ - first_, r_.training.exit_after, end_, r_.training.steps, secs, last_loss_);
  else
    std::printf("done: %ld steps in %.1f s | final loss %.4f", end_, secs, last_loss_);
  if (last_val_ >= 0) std::printf(" | val loss %.4f", last_val_);
  std::printf(" | metrics in %s/metrics.jsonl\n", r_.run.dir.c_str());
}

}  // namespace trainer
