// `trainer plan RECIPE.toml`: predicted memory per rank, by category, for each
// recompute mode and pipeline stage, and what recomputation costs in FLOPs.
// Nothing is allocated; no MPI.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "app/commands.h"
#include "engine/layout.h"
#include "planning/machine_profile.h"
#include "planning/memory_fit.h"
#include "planning/shrink.h"
#include "planning/step_model.h"
#include "app/plan_search.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "model/flops.h"
#include "model/layer/attention.h"
#include "runtime/errors.h"
#include "runtime/units.h"

namespace trainer {

namespace {
const char* kPlanUsage =
    "usage: trainer plan RECIPE.toml [--set section.key=value ...] [--ranks N] [--memory-per-rank-gb X]\n"
    "  Predicts each rank's memory (parameters, gradients, optimizer state,\n"
    "  activations, communication buffers, temporaries; with runtime.backend = \"cuda\"\n"
    "  also what only that backend holds: cuDNN's attention workspace, cuBLASLt's,\n"
    "  NCCL's buffers, the allocator's reserve) for every pipeline stage\n"
    "  and recompute mode (none, selective, full; [recompute] layers applies),\n"
    "  and the forward FLOPs recomputation adds. --ranks N is the world size\n"
    "  the job will have (default: the product of the recipe's parallel sizes, or 1).\n"
    "  Last, whether the worst rank fits in this machine's memory shared by\n"
    "  --ranks-per-node ranks (default: all of them), as `trainer train` checks, or in\n"
    "  --memory-per-rank-gb X (GPU memory on the CUDA backend): a cluster planned from elsewhere.\n"
    "\n"
    "       trainer plan RECIPE.toml --ranks N --search --profile FILE [--top K]\n"
    "                    [--price-per-rank-hour X] [--tokens N] [--memory-per-rank-gb X]\n"
    "                    [--json FILE] [--all-precisions]\n"
    "  Every layout of N ranks (each split over the parallel dimensions, in each of a\n"
    "  dimension's ways, sequence parallelism, 1f1b or interleaved,\n"
    "  micro-batch, recompute mode, ZeRO stage; the recipe's precision) that is valid and\n"
    "  fits memory (this machine's, or --memory-per-rank-gb), ranked by the step time the\n"
    "  cost model predicts from a machine profile (`trainer calibrate`): memory, step\n"
    "  time and its parts, tokens/s, MFU, the run's wall time for training.steps (or\n"
    "  --tokens) and its cost; the --set lines of the best; why the others were rejected.\n"
    "  --json FILE: every ranked and rejected layout, for scripts. --all-precisions: fp32\n"
    "  and bf16 both (they change the numbers, not only the speed; calibrate with it too).\n"
    "  --profile A.json,B.json,...: several calibrations of the job (on a machine whose\n"
    "  speed moves, calibrate a few times); each layout's prediction is the median of theirs.\n"
    "\n"
    "       trainer plan RECIPE.toml --nodes N [--profile FILE] [--memory-per-rank-gb X]\n"
    "  The job `trainer supervise` would run with supervisor.elastic = true on N of its\n"
    "  launch.nodes nodes: the same ranks per node, fewer data-parallel replicas, the same\n"
    "  global batch; each rank's memory against the whole job's and whether it fits here\n"
    "  (shared by a node's ranks; or in --memory-per-rank-gb X; the supervisor checks it\n"
    "  against the machine it runs on before it shrinks), and with --profile the step time of both.\n";
// The memory verdict's last line: against this machine's memory, or
// --memory-per-rank-gb.
void print_fit(const Recipe& r, const RecipeArgs& args, int per_node) {
  const double given = args.number("--memory-per-rank-gb", 0, 0, kMaxMemoryPerRankGb, true);
  const MemoryFit fit = check_job_memory(r, per_node, given * 1e9);  // GB as format_gb prints them
  std::printf("%s %s: %s\n", fit.fits ? "fits" : "does NOT fit",
              given > 0 ? "in --memory-per-rank-gb" : "on this machine", fit.message.c_str());
}
}

// What the cuda column holds, per stage (runtime/cuda_memory.h says where
// each figure comes from).
static void print_cuda_memory(const Recipe& r) {
  std::printf("cuda: what only the CUDA backend holds, in MB (the pre-flight counts it):\n");
  for (int stage = 0; stage < r.parallel.grid.pp; stage++) {
    const RankLayout l = rank_layout(r, stage);
    const CudaMemory c = plan_memory(r.model, l, r.recompute).cuda;
    std::printf(
        "  stage %d: cuDNN attention workspace %.1f (%s), attention rows %.1f, ring pair block %.1f, "
        "bf16 logits gradient %.1f, rope table %.1f, cuBLASLt workspace %.1f, NCCL buffers %.1f (estimate), "
        "allocator reserve %.1f\n",
        stage, mib(c.attention_workspace),
        Attention::workspace_words(l).c_str(),
        mib(c.attention_rows), mib(c.attention_block), mib(c.logits_grad_bf16), mib(c.rope_table), mib(c.gemm_workspace), mib(c.nccl_buffers),
        mib(c.allocator_reserve));
  }
}

// The stage that needs most memory, with the recipe's recompute mode.
static double worst_rank_bytes(const Recipe& r) {
  double worst = 0;
  for (int stage = 0; stage < r.parallel.grid.pp; stage++)
    worst = std::max(worst, plan_memory(r.model, rank_layout(r, stage), {r.recompute.mode, r.recompute.layers}).total());
  return worst;
}

// `plan --nodes N`: the smaller job supervisor.elastic would run (planning/shrink.h).
static int plan_nodes(const RecipeArgs& args) {
  const Recipe r = load_recipe(args.recipe, args.overrides, (int)args.integer("--ranks", 0, 1, GridShape::kMaxRanks), false);
  // The nodes a launch runs on: launch.nodes, else every host listed.
  const int full_ranks = r.launch.ranks > 0 ? r.launch.ranks : r.parallel.grid.ranks();
  const int full_nodes = r.launch.nodes > 0 ? r.launch.nodes : (int)r.launch.hosts.size();
  if (full_nodes <= 0)
    throw RecipeError("plan --nodes N needs launch.nodes (or launch.hosts): the nodes the job runs on, of which N "
                      "are left");
  const int nodes = (int)args.integer("--nodes", 1, 1, GridShape::kMaxRanks);
  const Shrink s = shrink_job(r, full_ranks, full_nodes, nodes, false);
  if (!s.ok) throw RecipeError("plan --nodes " + std::to_string(nodes) + ": the job cannot run there: " + s.why);
  const Recipe& n = s.recipe;
  const int per_node = full_ranks / full_nodes;
  Recipe full = r;  // the whole job: every rank of launch.nodes nodes
  full.parallel.grid.dp = full_ranks / (int)r.parallel.grid.model_ranks();
  std::printf("plan %s on %d of its %d nodes (%d rank(s) each): %d ranks, dp %d -> %d, %s; %d -> %d "
              "micro-batches of %d per replica per step (global batch %ld, the same samples in the same order)\n",
              args.recipe.c_str(), nodes, full_nodes, per_node, s.ranks, full.parallel.grid.dp, n.parallel.grid.dp,
              grid_sizes(n.parallel.grid, named_dims(n.parallel.grid) & kModelDims, ", ").c_str(), full.accum_steps(), n.accum_steps(),
              n.training.micro_batch, (long)n.training.global_batch);
  std::printf("memory per rank (the stage that needs most, recompute %s): %.1f MB, was %.1f MB\n",
              recompute_name(r.recompute.mode), mib(worst_rank_bytes(n)), mib(worst_rank_bytes(full)));
  print_fit(n, args, per_node);
  if (args.has("--profile")) {
    const std::vector<MachineProfile> profiles = load_profiles(args.list("--profile"));  // the models refer to them
    StepModels model(profiles, per_node);
    const StepPrediction a = model.predict(full), b = model.predict(n);
    std::printf("step time: %.1f ms, was %.1f ms (%.2fx); %.0f tokens/s, was %.0f\n", b.step_ms, a.step_ms,
                b.step_ms / a.step_ms, b.tokens_per_s, a.tokens_per_s);
  }
  return 0;
}

int cmd_plan(int argc, char** argv) {
  const RecipeArgs args = parse_recipe_args({"plan", kPlanUsage, {"--search", "--all-precisions"},
                                             {"--ranks", "--ranks-per-node", "--profile", "--top", "--price-per-rank-hour",
                                              "--tokens", "--memory-per-rank-gb", "--json", "--nodes"}},
                                            argc, argv);
  if (args.help) return std::fputs(kPlanUsage, stdout), 0;
  const std::string& path = args.recipe;
  int ranks = (int)args.integer("--ranks", 0, 1, GridShape::kMaxRanks);
  if (args.has("--nodes")) return plan_nodes(args);
  if (args.has("--search")) {
    if (!ranks) throw RecipeError("plan --search needs --ranks N: the world size to search layouts for");
    return plan_search(args, ranks);
  }
  const Recipe r = load_recipe(path, args.overrides, ranks, false);
  ranks = r.parallel.grid.ranks();
  const double step_flops = train_flops_per_token(r.model) * r.tokens_per_step();
  std::printf("plan %s: %s, %d ranks = %s%s, micro-batch %d x %d, %d micro-batches per step, %s\n", path.c_str(),
              arch_name(r.model.arch), ranks, grid_sizes(r.parallel.grid, named_dims(r.parallel.grid)).c_str(),
              r.parallel.sequence_parallel ? " (sequence parallel)" : "", r.training.micro_batch, r.model.seq_len,
              r.accum_steps(), dtype_name(r.training.precision));
  if (r.model.moe.enabled()) {
    // What the plan below holds of the experts (model/layer/moe_mlp.cpp):
    // this rank's, and its exchange's buffers at their worst case.
    const MoeConfig& e = r.model.moe;
    const int ep = r.parallel.grid.ep, layers = r.model.n_layers - e.dense_layers;
    const LayerShape s = layer_shape(r.model, rank_layout(r, 0));
    std::printf("experts: %d of %d layers route each token to %d of %d experts (%s weights stored, %s used per "
                "token, the MFU's); %d on each rank (ep %d)%s\n",
                layers, r.model.n_layers, e.top_k, e.experts, format_count(stored_matmul_params(r.model)).c_str(),
                format_count(matmul_params(r.model)).c_str(), e.experts / ep, ep,
                ep > 1 ? (", whose all-to-all buffers hold up to " + std::to_string(s.X) +
                          " token rows (every ep rank's tokens to this rank's experts)").c_str()
                       : "");
  }
  if (r.training.precision != DType::F32)
    std::printf("%s: params = fp32 master weights + their %s copy; activations, messages and the data-parallel "
                "gradient copy in %s; gradients and optimizer state fp32\n",
                dtype_name(r.training.precision), dtype_name(r.training.precision), dtype_name(r.training.precision));
  if (r.parallel.zero_sharded() && r.parallel.zero_stage == 1)
    std::printf("ZeRO-1: each of the %s ranks holding the same weights keeps 1/%d of AdamW's state (shown: rank "
                "0's block and the tail of fewer than %s elements every rank keeps) and writes its part of a "
                "checkpoint to a file of its own\n",
                grid_names(kWeightReplicaDims, " x ").c_str(), (int)r.parallel.grid.weight_replicas(),
                grid_names(kWeightReplicaDims, " x ").c_str());
  // A tied embedding's units are held for the step (model/param_units.h).
  const char* tied = r.model.tie_embeddings ? "the tied embedding's whole gradients, kept for the step, " : "";
  if (r.parallel.zero_sharded() && r.parallel.zero_stage == 2)
    std::printf("ZeRO-2: each of the %s ranks holding the same weights keeps 1/%d of AdamW's state and of the "
                "gradients (shown: rank 0's slice of every unit - the embedding, each layer, the head -, %stwo "
                "unit windows taking turns) and writes its part of a checkpoint to a file of its own\n",
                grid_names(kWeightReplicaDims, " x ").c_str(), (int)r.parallel.grid.weight_replicas(), tied);
  if (r.parallel.zero_sharded() && r.parallel.zero_stage == 3) {
    const std::string turns =
        r.parallel.reshard_after_forward
            ? std::to_string(1 + r.parallel.zero_prefetch) + " units' gathered weights taking turns (" +
                  std::to_string(r.parallel.zero_prefetch) + " gathered ahead: parallel.zero_prefetch) and two "
                  "units' gradients"
            : "every unit's gathered weights, kept for the step (parallel.reshard_after_forward = false), and two "
              "units' gradients taking turns";
    const std::string persist =
        r.parallel.zero_persist_below > 0
            ? "; the gathered weights and whole gradients of each layer's norm weights and biases, kept for the step "
              "where each holds fewer than " + std::to_string(r.parallel.zero_persist_below) +
                  " elements (parallel.zero_persist_below)"
            : "";
    std::printf("ZeRO-3: each of the %s ranks holding the same weights keeps 1/%d of the fp32 weights, the gradients "
                "and AdamW's state (shown: rank 0's slice of every unit - the embedding, each layer, the head -, "
                "%s%s) and writes its part of a checkpoint to a file of its own\n",
                grid_names(kWeightReplicaDims, " x ").c_str(), (int)r.parallel.grid.weight_replicas(),
                r.model.tie_embeddings ? "the tied embedding's gathered weights and whole gradients, kept for the step, "
                                       : "",
                (turns + persist).c_str());
  }
  std::printf("memory per rank in MB (the recipe's mode is marked *); extra forward FLOPs per step and rank\n");
  const bool cuda = r.runtime.backend == "cuda";  // its own buffers: a column of their own
  std::printf("%-6s %-11s %9s %9s %9s %11s %9s %11s%s %9s %16s\n", "stage", "recompute", "params", "grads",
              "optimizer", "activations", "comm", "temporaries", cuda ? "      cuda" : "", "total", "extra fwd FLOPs");
  for (int stage = 0; stage < r.parallel.grid.pp; stage++) {
    const RankLayout l = rank_layout(r, stage);
    for (RecomputeMode m : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full}) {
      const RecomputeConfig rc{m, r.recompute.layers};
      const MemoryPlan p = plan_memory(r.model, l, rc);
      const double extra = recompute_extra_flops(r.model, l, rc);
      char mode[16];
      std::snprintf(mode, sizeof mode, "%s%s", recompute_name(m), m == r.recompute.mode ? "*" : "");
      std::printf("%-6d %-11s", stage, mode);
      for (double b : p.bytes) std::printf(" %9.1f", mib(b));
      if (cuda) std::printf(" %9.1f", mib(p.cuda.total()));
      std::printf(" %9.1f %7.2f G (%4.1f%%)\n", mib(p.total()), extra / 1e9,
                  100 * extra / (step_flops / ranks));
    }
  }
  if (cuda) print_cuda_memory(r);
  // The same verdict `trainer train` gives before it allocates, for this
  // machine with the job's ranks on it (--ranks-per-node, default all).
  print_fit(r, args, (int)args.integer("--ranks-per-node", ranks, 1, GridShape::kMaxRanks));
  return 0;
}

}  // namespace trainer
