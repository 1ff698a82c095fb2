// `trainer calibrate RECIPE.toml`: measures this machine for the cost model
// (planning/calibrate.h) and writes a machine profile that `trainer plan
// --search` and `trainer smoke` read.
#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "app/environment.h"
#include "app/commands.h"
#include "parallel/mpi_command.h"
#include "planning/calibration_plan.h"
#include "ckpt/output_guard.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "app/scratch_run.h"
#include "engine/job.h"
#include "planning/real_steps.h"
#include "planning/calibrate.h"
#include "report/run_files.h"
#include "runtime/errors.h"
#include "runtime/host_name.h"
#include "runtime/units.h"
#include "runtime/flight_recorder.h"
#include "runtime/sgemm_peak.h"
#include "runtime/utc_time.h"
#include "engine/layout.h"
#include "parallel/mpi_world.h"

namespace trainer {

namespace {

const char* kCalibrateUsage =
    "usage: [mpirun -np N] trainer calibrate RECIPE.toml [--set section.key=value ...]\n"
    "                                       [--output FILE [--force]] [--ranks N] [--all-precisions]\n"
    "  Measures what the cost model of `trainer plan --search` and `trainer smoke`\n"
    "  needs on this machine and backend (a minute or two), and writes it as a machine\n"
    "  profile (JSON, default machine_profile.json):\n"
    "  - every op one layer, the embedding and the head of the recipe's model issue,\n"
    "    for each shard shape (micro-batch, tensor-parallel size, sequence parallelism,\n"
    "    context-parallel size and kind)\n"
    "    the layouts of --ranks ranks (default: the job's size) can use; timed on rank 0\n"
    "    while the other ranks sleep; a square GEMM in the run's precision\n"
    "  - all-reduce, reduce-scatter, all-gather, all-to-all and a ring's send/receive\n"
    "    (context parallelism) in groups of every size that divides the job (every\n"
    "    group busy at once, as in training) and send/receive between pairs, 4 KB to\n"
    "    16 MB; launch it with the ranks per node training will use\n"
    "    (and across nodes to measure the network)\n"
    "  - on the CPU, how work slows with the number of ranks computing at once, and\n"
    "    what a tensor- or context-parallel collective waits for its partners between\n"
    "    pieces of compute when every rank computes\n"
    "  - 8 real steps of one layout (data parallel over all ranks, synthetic tokens, a\n"
    "    scratch directory under $TMPDIR) against the model's prediction for it: plan\n"
    "    and smoke scale their step times by the ratio (the anchor); then 8 of the\n"
    "    layout with the most pipeline actions per step (2 stages, micro-batch 1,\n"
    "    interleaved if the layers allow): what an action costs beyond its ops\n"
    "  - writing and fsyncing a 64 MB file beside FILE (checkpoint bandwidth)\n"
    "  --all-precisions: time the ops in fp32 and bf16, for plan --search --all-precisions.\n"
    "  --output replaces an existing file only when it is an earlier machine profile\n"
    "  (--force: any file), and never goes inside a checkpoint directory (exit 2).\n";

// Above this spread between passes of the same work, calibrate warns.
constexpr double kSpeedVariationWarning = 0.25;

// A few real steps of a layout through `trainer train`'s own code
// (synthetic tokens, a scratch directory): on rank 0 the recipe that ran
// and the median step after the warm-up (0 ms when they failed).
// Collective; `sets` and `label` from rank 0.
struct RealSteps {
  Recipe ran;
  double ms = 0;
};
RealSteps real_steps(const RecipeArgs& args, const std::vector<std::string>& sets, const std::string& label, int rank,
                     int size) {
  std::vector<std::string> overrides = args.overrides;
  overrides.insert(overrides.end(), sets.begin(), sets.end());
  Scratch s;
  RealSteps out;
  if (shared_scratch(args.recipe, overrides, true, rank, size, kRealSteps, s) != 0) return out;
  if (rank == 0) std::fprintf(stderr, "calibrate: %ld real steps of %s\n", kRealSteps, label.c_str());
  const int code = run_inside(train_args(args.recipe, overrides, s, kRealSteps), rank, size);
  if (rank != 0) return out;
  out.ms = code == 0 ? real_step_ms(read_run_files(s.dir + "/run")) : 0;
  if (out.ms > 0)
    out.ran = load_recipe(s.dir + "/run/recipe.resolved.toml", {}, 0, false);
  else
    std::fprintf(stderr, "calibrate: warning: the steps of %s failed (exit %d)\n", label.c_str(), code);
  std::filesystem::remove_all(s.dir);
  return out;
}

// The anchor (its factor scales every step time), then the layout with the
// most actions (what an action costs beyond its ops). Collective.
void measure_real_steps(const RecipeArgs& args, const std::vector<std::vector<std::string>>& sets,
                        const std::vector<std::string>& labels, int per_node, MachineProfile& p, int rank, int size) {
  if (labels.empty()) return;
  const RealSteps a = real_steps(args, sets[0], labels[0], rank, size);
  if (rank == 0 && a.ms > 0) set_anchor(p, per_node, a.ran, labels[0], a.ms);
  if (labels.size() < 2) return;
  const RealSteps b = real_steps(args, sets[1], labels[1], rank, size);
  if (rank == 0 && a.ms > 0 && b.ms > 0) {
    p.action_layout = labels[1], p.action_measured_ms = b.ms;
    solve_action_cost(p, per_node, a.ran, b.ran, b.ms);
  }
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "";
}

// The cores this node's ranks may run on: the union of their affinity masks
// (Open MPI binds each rank to one core when there are at most two, so one
// rank's own mask says too little). Collective.
int node_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return (int)std::thread::hardware_concurrency();
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Allreduce(MPI_IN_PLACE, &set, (int)sizeof set, MPI_UNSIGNED_CHAR, MPI_BOR, node);
  MPI_Comm_free(&node);
  return CPU_COUNT(&set);
}

void describe(const MachineProfile& p, const std::string& path, double seconds) {
  std::printf("calibrate: %zu op shapes, GEMM %.1f GFLOP/s per rank (%s, %d thread(s)), %d %s\n", p.ops.size(),
              p.gemm_gflops, p.device.empty() ? p.cpu.c_str() : p.device.c_str(), p.threads_per_rank,
              p.compute_units, p.backend == "cpu" ? "cores" : "GPUs");
  for (const auto& [key, pts] : p.collectives)
    if (pts.size() >= 2)
      std::printf("  %-18s %8.3f ms at %6.0f KB, %8.1f MB/s at %6.1f MB\n", key.c_str(), pts.front().ms,
                  pts.front().bytes / 1024, pts.back().mib_per_s(), mib(pts.back().bytes));
  if (!p.busy_slowdown.empty()) {
    std::printf("  work slows while 1, 2, ... of the %zu ranks compute (the others waiting):", p.busy_slowdown.size());
    for (double f : p.busy_slowdown) std::printf(" x%.2f", f);
    std::printf("\n");
  }
  for (const auto& [g, pts] : p.tp_sync) {
    std::printf("  a tensor- or context-parallel collective in groups of %d waits for its partners, after compute of", g);
    for (const SyncPoint& s : pts) std::printf(" %.2f ms: +%.3f ms;", s.segment_ms, s.extra_ms);
    std::printf("\n");
  }
  if (p.anchor_measured_ms > 0)
    std::printf("  a real step of %s: %.1f ms, the model without it %.1f ms: step times x%.2f\n",
                p.anchor_layout.c_str(), p.anchor_measured_ms, p.anchor_predicted_ms, p.step_factor());
  if (p.action_measured_ms > 0)
    std::printf("  a real step of %s: %.1f ms: a pipeline action costs %.2f ms beyond its ops (alone)\n",
                p.action_layout.c_str(), p.action_measured_ms, p.action_ms);
  std::printf("  disk %.0f MB/s (write + fsync)\nwrote %s in %.0f s\n", p.disk_mb_per_s, path.c_str(), seconds);
  if (p.speed_variation > kSpeedVariationWarning)
    std::printf("calibrate: warning: the same work took up to %.0f%% longer in one pass than in another: this "
                "machine's speed moved while calibrating (other jobs on it, or a shared host), and the profile "
                "may misprice layouts against each other; calibrate again when it is quiet\n",
                100 * p.speed_variation);
}

std::string profile_path(const RecipeArgs& args) {
  return args.has("--output") ? args.options.at("--output") : "machine_profile.json";
}

int calibrate(const RecipeArgs& args, int rank, int size) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out = profile_path(args);
  const int ranks = (int)args.integer("--ranks", size, 1, GridShape::kMaxRanks);
  const Recipe r = load_recipe(args.recipe, args.overrides, 0, false);
  const int per_node = ranks_on_node();
  const int local_rank = launcher_local_rank();
  auto be = make_backend(backend_options(r, per_node, local_rank));
  MachineProfile p;
  p.created = iso_time(wall_seconds()), p.cpu = cpu_model(), p.backend = r.runtime.backend;
  p.device = be->device_name(), p.precision = dtype_name(r.training.precision), p.ranks = size;
  p.host = host_name();
  p.compute_units = p.device.empty() ? node_cores() : std::max(1, device_memory(local_rank, per_node).devices);
  p.threads_per_rank = p.device.empty() ? r.runtime.threads : 1;
  std::vector<int> sync_groups;  // the sizes of the groups that talk inside a layer (kLayerSplitDims), for their collectives' waits
  std::vector<std::vector<std::string>> real_sets;  // the anchor, then the layout with the most actions
  std::vector<std::string> real_labels;
  if (rank == 0) {
    const bool both = args.has("--all-precisions");
    const std::vector<LayoutCandidate> cands = layout_candidates(r, ranks, both);
    const CalibrationPlan plan = calibration_plan(cands, r, per_node);
    const std::vector<ShardShape>& shards = plan.shards;
    if (plan.anchor && ranks == size) {  // real steps run on this job's ranks
      real_sets.push_back(plan.anchor->sets), real_labels.push_back(plan.anchor->label);
      if (plan.many_actions)
        real_sets.push_back(plan.many_actions->sets), real_labels.push_back(plan.many_actions->label);
    }
    sync_groups = plan.group_sizes;
    std::fprintf(stderr, "calibrate: timing the ops of %zu shard shape(s) of %d-rank layouts on rank 0\n",
                 shards.size(), ranks);
    const GemmProbe probe = gemm_probe(*be, r.training.precision, 1024);
    p.gemm_gflops = measure_gemm_gflops(*be, probe.n, 1.0, probe.dt);
    measure_ops(*be, r.model, shards, p, [](size_t i, size_t n) {
      std::fprintf(stderr, "calibrate: pass %zu/%zu over the shard shapes timed\n", i, n);
    });
  }
  wait_asleep(MPI_COMM_WORLD);
  if (rank == 0 && size > 1) std::fprintf(stderr, "calibrate: collectives over %d ranks\n", size);
  std::vector<int> groups;
  for (int g = 2; g <= size; g++)
    if (size % g == 0) groups.push_back(g);
  measure_collectives(MPI_COMM_WORLD, groups, {4096, 65536, 1 << 20, 16 << 20}, r.training.precision, p);
  if (p.device.empty()) {  // a GPU rank has its device to itself
    measure_sharing(MPI_COMM_WORLD, *be, p);
    broadcast_ints(sync_groups);
    if (rank == 0 && !sync_groups.empty())
      std::fprintf(stderr, "calibrate: tensor- and context-parallel collectives between pieces of compute\n");
    measure_tp_sync(MPI_COMM_WORLD, *be, sync_groups, p);
  }
  broadcast_strings(real_labels);
  real_sets.resize(real_labels.size());
  for (std::vector<std::string>& v : real_sets) broadcast_strings(v);
  measure_real_steps(args, real_sets, real_labels, per_node, p, rank, size);
  if (rank != 0) return kExitOk;
  const size_t slash = out.find_last_of('/');
  p.disk_mb_per_s = measure_disk(slash == std::string::npos ? "." : out.substr(0, slash), 64);
  save_profile(p, out);
  describe(p, out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return kExitOk;
}

}  // namespace

int cmd_calibrate(int argc, char** argv) {
  const RecipeArgs args =
      parse_recipe_args({"calibrate", kCalibrateUsage, {"--all-precisions", "--force"}, {"--output", "--ranks"}}, argc, argv);
  if (args.help) return std::fputs(kCalibrateUsage, stdout), kExitOk;
  // Before minutes of measuring: where the profile goes (every process checks the same path).
  check_output_path(profile_path(args), "machine profile", args.has("--force"), is_machine_profile);
  return run_under_mpi([&](int rank, int size) { return calibrate(args, rank, size); });
}

}  // namespace trainer
