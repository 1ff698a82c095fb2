// `trainer bench`: this machine's sgemm peak, and the model's training
// throughput (tokens/s, MFU) on synthetic tokens in one process. No data or
// MPI needed; scripts/bench.sh compares it with PyTorch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/environment.h"
#include "app/commands.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "engine/throughput_bench.h"
#include "model/flops.h"
#include "runtime/cpu/blas_core.h"
#include "runtime/errors.h"
#include "runtime/metrics.h"
#include "runtime/sgemm_peak.h"
#include "runtime/units.h"
#include "engine/layout.h"

namespace trainer {

namespace {
const char* kBenchUsage =
    "usage: trainer bench RECIPE.toml [--set section.key=value ...] [--steps N] [--warmup N]\n"
    "  Times forward + backward + AdamW on one micro-batch of random tokens for the\n"
    "  recipe's model with runtime.threads threads (or on the GPU with runtime.backend =\n"
    "  \"cuda\"). MFU is against runtime.peak_gflops when set, else a known GPU's\n"
    "  data-sheet peak, else a GEMM measured in the same process; a model faster\n"
    "  than that peak shows it is low, and MFU is then against the model's own rate\n"
    "  (never above 100%). Prints a summary and a final JSON line.\n"
    "  --compare-recompute: one model per recompute mode (none, selective, full),\n"
    "  steps taken round-robin; a summary and JSON line for each.\n"
    "  --blas-core: print the OpenBLAS kernel set the trainer forces on this CPU\n"
    "  (empty when OpenBLAS's own choice is kept) and exit.\n";

// A summary and a JSON line per recompute mode.
void print_bench(const Recipe& r, const std::string& path, const std::vector<BenchRun>& runs, double peak,
                 const std::string& peak_source, int steps, int warmup) {
  std::printf("bench %s: %s, %zu params, micro-batch %d x %d, %d thread(s), %s\n", path.c_str(),
              arch_name(r.model.arch), runs.front().params, runs.front().micro_batch, r.model.seq_len,
              r.runtime.threads, dtype_name(r.training.precision));
  std::printf("  peak           %8.1f GFLOP/s (%s)\n", peak, peak_source.c_str());
  for (const BenchRun& rn : runs) {
    const BenchFigures f = bench_figures(r, rn, peak);
    const double best = f.fastest_ms, tps = f.tokens_per_s, achieved = f.model_gflops;
    const double act_mb = mib(rn.memory.peak[(int)Mem::Activations]);
    const char* mode = recompute_name(rn.mode);
    std::printf("  [recompute %s]\n", mode);
    std::printf("  step           %8.1f ms fastest, %.1f ms median of %d after %d warm-up (forward %.1f, backward %.1f, "
                "optimizer %.1f)\n",
                best, f.median_ms, steps, warmup, f.median_phase_ms[0], f.median_phase_ms[1], f.median_phase_ms[2]);
    std::printf("  throughput     %8.1f tokens/s, %.1f GFLOP/s model FLOPs\n", tps, achieved);
    std::printf("  MFU            %8.1f%% of that peak\n", 100 * f.mfu);
    if (achieved > peak)
      std::printf("  note: the model computes %.1f GFLOP/s, above the %.3g GFLOP/s peak (%s): that peak is low, "
                  "so MFU is against the model's own rate\n", achieved, peak, peak_source.c_str());
    std::printf("  activations    %8.1f MB peak, %.1f MB in all\n", act_mb, mib(rn.memory.total_peak));
    JsonRecord rec;
    rec.add("bench", path).add("params", (long)rn.params).add("threads", r.runtime.threads)
        .add("sgemm_gflops", peak).add("peak_source", peak_source).add("step_ms", best).add("median_step_ms", f.median_ms)
        .add("median_step_cpu_ms", f.median_cpu_ms).add("tokens_per_s", tps)
        .add("model_gflops", achieved).add("mfu", f.mfu).add("mfu_peak_gflops", f.mfu_peak_gflops).add("loss", rn.loss)
        .add("recompute", std::string(mode)).add("activations_mb", act_mb)
        .add("precision", std::string(dtype_name(r.training.precision)))
        .add("host_syncs_per_step", f.host_syncs);
    std::printf("%s\n", rec.str().c_str());
  }
}
}

int cmd_bench(int argc, char** argv) {
  for (int i = 0; i < argc; i++)
    if (!std::strcmp(argv[i], "--blas-core")) {  // for scripts/bench.sh: the kernels we would force
      const char* core = blas_core_upgrade();
      std::printf("%s\n", core ? core : "");
      return 0;
    }
  const RecipeArgs args =
      parse_recipe_args({"bench", kBenchUsage, {"--compare-recompute"}, {"--steps", "--warmup"}}, argc, argv);
  if (args.help) return std::fputs(kBenchUsage, stdout), 0;
  const std::string& path = args.recipe;
  std::vector<std::string> overrides = args.overrides;
  const int steps = (int)args.integer("--steps", 3, 1, 1000000), warmup = (int)args.integer("--warmup", 1, 0, 1000000);
  const bool compare_recompute = args.has("--compare-recompute");
  // One process: the recipe's parallel layout does not apply (nor a --set of it: these come last).
  for (const GridDim& d : kGridDims) overrides.push_back("parallel." + std::string(d.name) + "=1");
  overrides.insert(overrides.end(),
                   {"parallel.sequence_parallel=false", "parallel.schedule=1f1b", "parallel.virtual_stages=1"});
  const Recipe r = load_recipe(path, overrides, 1, false);
  const BackendOptions options = backend_options(r, 1, launcher_local_rank());
  auto be = make_backend(options);
  // A known device's data-sheet peak; otherwise the machine is shared:
  // measure the peak before and after the steps and keep the better one (a
  // higher peak can only lower the reported MFU).
  // runtime.peak_gflops, when set, is the peak, as in training.
  const double given = r.runtime.peak_gflops;
  const KnownPeak known = given > 0 ? KnownPeak{given, "runtime.peak_gflops"} : known_peak(*be, r.training.precision);
  const GemmProbe probe = gemm_probe(*be, r.training.precision, 2048);
  double peak = known.gflops > 0 ? known.gflops : measure_gemm_gflops(*be, probe.n, 1.0, probe.dt);

  // One model per recompute mode compared.
  std::vector<RecomputeMode> modes = {r.recompute.mode};
  if (compare_recompute) modes = {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full};
  const std::vector<BenchRun> runs = bench_training(r, modes, steps, warmup, options, be);
  if (known.gflops == 0) peak = std::max(peak, measure_gemm_gflops(*be, probe.n, 1.0, probe.dt));
  const std::string device = be->device_name();
  const std::string source = known.gflops > 0 ? known.source
                                              : "measured " + (device.empty() ? "" : device + " ") +
                                                    dtype_name(probe.dt) + " GEMM, best of before and after";
  print_bench(r, path, runs, peak, source, steps, warmup);
  return 0;
}

}  // namespace trainer
