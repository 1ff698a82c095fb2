#include "engine/job.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/hdf5_tensors.h"
#include "data/tokenizer.h"
#include "engine/device_comms.h"
#include "parallel/mpi_world.h"
#include "runtime/crash_report.h"
#include "runtime/errors.h"
#include "runtime/peak_cache.h"
#include "runtime/sgemm_peak.h"
#include "runtime/stop_signal.h"
#include "engine/layout.h"

namespace trainer {

namespace {

// The per-rank peak MFU is relative to: runtime.peak_gflops, else a known
// GPU's data-sheet peak for the run's precision, else (an unknown GPU) a
// short GEMM in that precision, else (the CPU) the cached sgemm measurement
// for this machine and launch shape, else measured now (all ranks at once,
// as they will train; best of 1 s) and cached.
void find_peak(Job& job) {
  const Recipe& r = job.recipe;
  ControlComm& world = job.grid->world();
  if (r.runtime.peak_gflops > 0) {
    job.peak_gflops = r.runtime.peak_gflops, job.peak_source = "runtime.peak_gflops";
    return;
  }
  if (const KnownPeak k = known_peak(*job.backend, r.training.precision); k.gflops > 0) {
    job.peak_gflops = k.gflops, job.peak_source = k.source;
    return;
  }
  if (!job.backend->device_name().empty()) {  // a GPU not in the table: a short GEMM in the run's precision
    const GemmProbe probe = gemm_probe(*job.backend, r.training.precision, 1024);
    double g = measure_gemm_gflops(*job.backend, probe.n, 0.5, probe.dt);
    world.allreduce_sum(&g, 1);
    job.peak_gflops = g / world.size(), job.peak_source = "measured now (" + job.backend->device_name() + ", " +
                                                         dtype_name(r.training.precision) + " GEMM)";
    return;
  }
  const std::string key = peak_cache_key(r.runtime.threads, job.node_ranks);
  job.peak_cache_key = key;
  std::string when;
  double cached = world.rank() == 0 ? read_cached_peak(job.peak_cache_file, key, &when) : 0;
  world.broadcast(&cached, sizeof cached, 0);
  if (cached > 0) {
    job.peak_gflops = cached, job.peak_source = "cached " + when + " in " + job.peak_cache_file;
    return;
  }
  double g = measure_gemm_gflops(*job.backend, 1024, 1.0);
  world.allreduce_sum(&g, 1);
  job.peak_gflops = g / world.size();
  const bool saved = world.rank() == 0 && write_cached_peak(job.peak_cache_file, key, job.peak_gflops);
  job.peak_source = std::string("measured now") + (saved ? ", cached in " + job.peak_cache_file : "");
}

// At start-up: can checkpoint.dir hold keep + 1 checkpoints (the kept ones
// and the one being written)? Only a warning: space may be freed later, and
// a failed save is reported when it happens.
void warn_checkpoint_space(Job& job) {
  const CheckpointSection& ck = job.recipe.checkpoint;
  if (!ck.saves()) return;
  double bytes = (double)job.rank_step->checkpoint_file_bytes();
  job.grid->world().allreduce_sum(&bytes, 1);
  if (job.grid->world().rank() != 0) return;
  const double free = (double)free_bytes(ck.dir);
  // An automatic interval is not known yet: count on at least two.
  const long steps_to_save = ck.automatic() ? std::max(2, ck.keep + 1) : job.recipe.training.steps / ck.every + 1;
  const long at_once = ck.keep > 0 ? std::min<long>(ck.keep + 1, steps_to_save) : steps_to_save;
  const long there = (long)committed_checkpoints(ck.dir).size();  // already on the disk
  const long more = std::max(1L, at_once - there);
  if (free >= more * bytes) return;
  std::fprintf(stderr,
               "warning: [checkpoint] dir %s has %.1f MB free; a checkpoint takes %.1f MB and this run holds up to "
               "%ld at once (checkpoint.keep = %d, plus the one being written), %ld more than now: %s\n",
               ck.dir.c_str(), free / 1e6, bytes / 1e6, at_once, ck.keep, more,
               free < bytes ? "not even the first one fits; saves will fail until space is freed"
                            : "later saves will fail unless space is freed (or lower checkpoint.keep)");
}

// The flight recorder sees every call on every group; the job start time
// (rank 0's) tells this job's dumps from older ones.
void start_recording(Job& job, int rank, int launch) {
  const double job_start = broadcast_double(wall_seconds());
  job.recorder = std::make_unique<FlightRecorder>(rank);
  job.recorder->set_job(job_start, launch);
  char crash_file[64];
  std::snprintf(crash_file, sizeof crash_file, "/flight/crash_rank_%05d.txt", rank);
  install_crash_report(job.recipe.run.dir + crash_file, rank, job_start);
}

}  // namespace

void Job::release() {
  watchdog.reset();
  probe.reset();
  metrics.reset();
  rank_step.reset();
  val = Blend();
  train = Blend();
  datasets.clear();
  backend.reset();
  grid.reset();
}

namespace {
// Plain entries: one source of all their files (each once). Named or
// weighted entries: a source each, in the order written. `key` (data.train,
// data.val) heads a data error, so a short validation shard is not taken for
// the training data.
Blend make_blend(Job& job, const char* key, const std::vector<DataSource>& entries,
                 const std::vector<std::string>& all_files) {
  const ModelConfig& m = job.recipe.model;
  std::vector<BlendSource> sources;
  auto add = [&](const std::string& name, double weight, const std::vector<std::string>& files) {
    try {
      job.datasets.push_back(std::make_unique<TokenDataset>(files, m.seq_len, m.vocab_size));
    } catch (const DataError& e) {
      throw DataError(std::string(key) + ": " + e.what());
    }
    sources.push_back({name, weight, job.datasets.back().get()});
  };
  const bool named = std::any_of(entries.begin(), entries.end(),
                                 [](const DataSource& s) { return s.weight > 0 || !s.name.empty(); });
  if (entries.empty()) return Blend();
  if (!named) add("", 1, all_files);
  else
    for (size_t i = 0; i < entries.size(); i++)
      add(entries[i].name.empty() ? "source" + std::to_string(i) : entries[i].name,
          entries[i].weight > 0 ? entries[i].weight : 1, entries[i].files);
  return Blend(std::move(sources));
}
}  // namespace

namespace {
// The special ids of the tokenizer that made the training data (its
// data_info.json), which an imported model's must equal. Unknown (nothing
// to check) when no tokenizer is recorded or it cannot be loaded here.
TextEnds data_text_ends(const Recipe& r, const std::string& tokenizer_dir) {
  try {
    return r.data.tokenizer.empty() ? TextEnds{} : make_tokenizer(r.data.tokenizer, tokenizer_dir)->ends;
  } catch (const UserError&) {
    return {};
  }
}
}  // namespace

std::vector<SetupStep> job_setup_steps(Job& job, int rank, int launch) {
  job.launch = launch;
  const Recipe& r = job.recipe;
  return {
      {"data",
       [&job, &r] {
         for (const Fault* f : job.faults.at(Fault::SetupStall, 0))
           std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(f->ms));
         job.train = make_blend(job, "data.train", r.data.train, r.data.train_files);
         job.val = make_blend(job, "data.val", r.data.val, r.data.val_files);
       }},
      // A kernel set this CPU lacks, a GPU that is missing: this rank alone.
      {"backend",
       [&job, &r] {
         int size = 1;
         MPI_Comm_size(MPI_COMM_WORLD, &size);
         if (size > 1) job.probe = std::make_unique<PeerProbe>();
         job.backend = make_backend(backend_options(r, job.node_ranks, job.local_rank));
       }},
      // Collectives only: the job's start time, the probe addresses, the
      // communicator splits (and NCCL's set-up).
      {"grid",
       [&job, &r, rank, launch] {
         start_recording(job, rank, launch);
         if (job.probe) swap_probe_addresses(*job.probe);
         job.grid = std::make_unique<ProcessGrid>(MPI_COMM_WORLD, r.parallel.grid, job.recorder.get(),
                                                  data_comms_for(*job.backend, job.node_ranks, rank == 0));
       }},
      {"model",
       [&job, &r] {
         job.rank_step = std::make_unique<RankStep>(*job.backend, groups_of(*job.grid), r, job.train, job.val);
       }},
      // Reads files only: a shard one rank cannot read fails that rank here.
      {"weights",
       [&job, &r, rank] {
         if (job.resumed_from.empty() && !r.checkpoint.init_from.empty()) {
           job.rank_step->init_from_hf(r.checkpoint.init_from, data_text_ends(r, job.tokenizer_dir));
           if (rank == 0)
             std::printf("weights from the Hugging Face model %s (optimizer state fresh)\n",
                         r.checkpoint.init_from.c_str());
         }
         if (!job.resumed_from.empty()) {
           job.rank_step->load_checkpoint(job.resumed_from);
           job.resumed_step = job.rank_step->steps_done();
         }
       }},
      {"peak",
       [&job] {
         find_peak(job);
         job.backend->reset_memory_peaks();  // the sgemm measurement is not training
       }},
      {"disk", [&job] { warn_checkpoint_space(job); }},
      {"metrics",
       [&job, &r, rank] {
         if (rank != 0) return;
         // A resumed run appends to the log of the run it continues.
         job.metrics = std::make_unique<MetricsLog>(r.run.dir + "/metrics.jsonl", job.resumed_from.empty());
         if (r.metrics.tensorboard) job.metrics->add_tensorboard(r.metrics.tensorboard_dir);
         if (!job.resumed_from.empty())
           std::printf("resumed from %s at step %ld\n", job.resumed_from.c_str(), job.rank_step->steps_done());
       }},
  };
}

void start_watchdog(Job& job, int rank) {
  char dump[64];
  std::snprintf(dump, sizeof dump, "/flight/rank_%05d.json", rank);
  Watchdog::NetworkCheck network;
  if (PeerProbe* probe = job.probe.get())
    network = [probe](const std::vector<int>& ranks) { return probe->check(ranks, 2.0); };
  job.watchdog = std::make_unique<Watchdog>(*job.recorder, job.recipe.runtime.comm_timeout,
                                            job.recipe.run.dir + dump, 3.0, dump_requests, network);
}

void note_newest_checkpoint(const std::string& newest) {
  set_stop_note("trainer: stop signal received: the ranks save a checkpoint at the end of this step and exit 75. "
                "If they are killed first (mpirun kills its ranks about a second after SIGTERM or Ctrl-C; send "
                "SIGUSR1 to mpirun to give them the time), " +
                (newest.empty() ? std::string("no checkpoint of this run was committed yet, so none is lost")
                                : "the newest committed checkpoint, " + newest + ", is intact: resume from it") +
                ".\n");
}

}  // namespace trainer
