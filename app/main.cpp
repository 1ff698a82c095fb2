// trainer: one executable, several subcommands.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "app/commands.h"
#include "runtime/cpu/blas_core.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/errors.h"
#include "runtime/self_exe.h"

namespace {
const char* kUsage =
    "usage: trainer <command> [options]\n"
    "\n"
    "commands:\n"
    "  train RECIPE.toml [--set section.key=value ...] [--resume PATH] [--start-over]\n"
    "        [--print-config] [--keys]\n"
    "        train a model; launch with mpirun -np N (or srun) for 3D parallelism\n"
    "  supervise RECIPE.toml [--set section.key=value ...] [-- LAUNCH COMMAND...]\n"
    "        run the training job (mpirun or srun, from [launch]) and restart it from the\n"
    "        newest checkpoint when it crashes or hangs; events in <run.dir>/events.jsonl\n"
    "  status RUN_DIR\n"
    "        where a run stands: step, loss, time to go, heartbeat, checkpoint, restarts\n"
    "  report RUN_DIR [--output FILE.html] [--force]\n"
    "        one HTML page with the run's charts (loss, lr, tokens/s, MFU, step time,\n"
    "        memory against the plan) and its launches, restarts and checkpoints\n"
    "  diagnose RUN_DIR\n"
    "        after a watchdog timeout or a crash: name the rank the others wait for\n"
    "        (flight recorders) or the rank that crashed (crash reports)\n"
    "  data prepare --input FILES_OR_DIRS... --output DIR [--tokenizer SPEC] [...]\n"
    "        tokenize text, JSONL or .gz files into llm.c or Megatron token files\n"
    "  data inspect FILES... [--head N]\n"
    "        format, token/document counts and largest id of token files\n"
    "  plan RECIPE.toml [--set section.key=value ...] [--ranks N]\n"
    "        predicted memory per rank by category for each recompute mode\n"
    "  plan RECIPE.toml --ranks N --search --profile FILE [--price-per-rank-hour X]\n"
    "        every layout of N ranks that fits, ranked by predicted step time, with\n"
    "        tokens/s, MFU, the run's time and cost\n"
    "  health RECIPE.toml   (under mpirun -np N or srun, across the nodes)\n"
    "        each node's product speed, memory, disk and network against the others'\n"
    "  calibrate RECIPE.toml [--output FILE]   (under mpirun -np N)\n"
    "        measure this machine's ops and collectives into a profile for plan and smoke\n"
    "  smoke RECIPE.toml [--steps N] [--profile FILE] [--json FILE] [--min-mfu X]\n"
    "        [--baseline FILE] [--synthetic] [--check-restart]   (under mpirun)\n"
    "        a few steps of the real layout: tokens/s, MFU, step-time parts, memory\n"
    "        against the plan and the prediction; exit 9 on a shortfall\n"
    "  ckpt inspect|verify|export PATH [--format hf] [--output FILE.h5|DIR] [--force]\n"
    "        look into, check, or export a checkpoint (Hugging Face names; --format hf:\n"
    "        a config.json + safetensors directory that transformers loads)\n"
    "  bench RECIPE.toml [--set section.key=value ...] [--steps N]\n"
    "        measure the sgemm peak and the model's tokens/s and MFU on this machine\n"
    "\n";

// The usage: the commands, then every exit code from runtime/errors.h.
void print_usage(FILE* to) {
  std::fputs(kUsage, to);
  std::fputs("exit codes:\n", to);
  for (const trainer::ExitCodeInfo& e : trainer::kExitCodes) std::fprintf(to, "  %3d  %s\n", e.code, e.meaning);
  std::fputs("  128+N killed by signal N\n"
             "Run `trainer <command> --help` for a command's options; `trainer --version`.\n",
             to);
}

// Settings the OpenBLAS and OpenMP runtimes read only when they load, so they
// must be in the environment before the process starts: if they are missing,
// set them and restart this same process image (before MPI is initialised).
// - OPENBLAS_CORETYPE: when OpenBLAS fell back to generic kernels on a CPU
//   with AVX2/AVX-512 (runtime/cpu/blas_core.h), sgemm runs ~8x slower.
// - OMP_WAIT_POLICY=passive: idle OpenMP workers sleep instead of spinning,
//   which otherwise steals the cores OpenBLAS's threads are about to use.
// The user's own values always win; TRAINER_NO_REEXEC=1 turns this off.
void tune_runtime_environment(char** argv) {
  if (std::getenv("TRAINER_NO_REEXEC") || std::getenv("TRAINER_REEXECED")) return;
  bool changed = false;
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    if (const char* core = trainer::blas_core_upgrade()) {
      setenv("OPENBLAS_CORETYPE", core, 1);
      changed = true;
    }
  }
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  if (!changed) return;
  setenv("TRAINER_REEXECED", "1", 1);
  // By the executable's real path, not /proc/self/exe: the kernel names the
  // process after the file it runs, and ps/top/pgrep should say "trainer".
  const std::string self = trainer::self_executable();
  execv(!self.empty() ? self.c_str() : "/proc/self/exe", argv);  // returns only on failure: carry on as we are
}

// TRAINER_CPU_KERNELS=avx2 (or generic) makes this process act as one on a
// CPU without the wider kernel sets: "auto" picks that set and a recipe that
// names a wider one is refused (the test binaries do the same:
// tests/support/kernel_set_from_env.cpp).
void apply_cpu_kernels_environment() {
  const char* name = std::getenv("TRAINER_CPU_KERNELS");
  if (!name || !*name) return;
  namespace cpu = trainer::cpu;
  cpu::cap_kernel_sets(cpu::resolve_kernel_set(name, {cpu::kernel_limits().cpu}, "TRAINER_CPU_KERNELS"));
}

}  // namespace

int main(int argc, char** argv) {
  tune_runtime_environment(argv);
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? trainer::kExitUsage : 0;
  }
  const char* cmd = argv[1];
  try {
    apply_cpu_kernels_environment();
    if (!std::strcmp(cmd, "--version") || !std::strcmp(cmd, "version")) return trainer::cmd_version();
    if (!std::strcmp(cmd, "train")) return trainer::cmd_train(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "data")) return trainer::cmd_data(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "bench")) return trainer::cmd_bench(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "plan")) return trainer::cmd_plan(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "ckpt")) return trainer::cmd_ckpt(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "diagnose")) return trainer::cmd_diagnose(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "supervise")) return trainer::cmd_supervise(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "status")) return trainer::cmd_status(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "report")) return trainer::cmd_report(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "calibrate")) return trainer::cmd_calibrate(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "smoke")) return trainer::cmd_smoke(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "health")) return trainer::cmd_health(argc - 2, argv + 2);
  } catch (const trainer::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return trainer::kExitInternal;
  }
  std::fprintf(stderr, "trainer: unknown command \"%s\"\n\n", cmd);
  print_usage(stderr);
  return trainer::kExitUsage;
}
