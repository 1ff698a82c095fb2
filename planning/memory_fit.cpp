#include "planning/memory_fit.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "engine/layout.h"
#include "model/flops.h"
#include "recipe/recipe_keys.h"
#include "recipe/recipe_rules.h"
#include "runtime/backend.h"
#include "runtime/host_memory.h"
#include "runtime/units.h"

namespace trainer {

namespace {

constexpr double kProcessBytes = 150e6;  // libraries, MPI and HDF5 buffers, loader: measured ~100-130 MB here

// Need of one stage: the plan, checkpoint buffers, the process.
MemoryFit need_of(const Recipe& r, int stage, bool writer) {
  MemoryFit f;
  f.plan = plan_memory(r.model, rank_layout(r, stage), r.recompute);
  // A checkpoint writer copies its fp32 state (master weights + AdamW m, v:
  // 1.5 times the optimizer's m and v) to a host snapshot, then builds its
  // file from it in memory: twice the state, blocking or async. Under ZeRO
  // every rank writes the part it updates.
  const double state = f.plan.bytes[(int)Mem::Optimizer] * 1.5;
  if (r.checkpoint.saves() && (writer || r.parallel.zero_sharded())) f.checkpoint = state * 2;
  f.process = kProcessBytes;
  f.need = f.plan.total() + f.checkpoint + f.process;
  return f;
}

MemoryFit worst(const Recipe& r, int stage, bool writer) {
  if (stage >= 0) return need_of(r, stage, writer);
  MemoryFit w;
  for (int s = 0; s < r.parallel.grid.pp; s++)
    if (MemoryFit f = need_of(r, s, writer); f.need > w.need) w = f;
  return w;
}

// Whether the recipe rules take a recipe (warnings aside), its job's ranks
// whatever they are.
bool ok(const Recipe& r) {
  for (const RecipeProblem& p : check_recipe(r, 0))
    if (!p.warning) return false;
  return true;
}

// Changes that would bring the need under `avail`, each with its need.
std::string suggestions(const Recipe& r, int stage, bool writer, double avail) {
  std::string out;
  auto consider = [&](Recipe alt, const std::string& what) {
    const double n = worst(alt, stage < 0 || stage >= alt.parallel.grid.pp ? -1 : stage, writer).need;
    out += (out.empty() ? "" : "; ") + what + " (" + format_gb(n) + (n <= avail ? ", fits)" : ")");
  };
  if (r.recompute.mode != RecomputeMode::Full || r.recompute.layers > 0) {
    Recipe a = r;
    a.recompute = {RecomputeMode::Full, -1};
    consider(a, "recompute.mode = \"full\"");
  }
  if (r.runtime.backend == "cuda" && r.runtime.deterministic_attention && r.training.precision == DType::BF16) {
    Recipe a = r;
    a.runtime.deterministic_attention = false;
    consider(a, "runtime.deterministic_attention = false (no B x H x T^2 attention workspace; reruns differ in the last bits)");
  }
  // A higher ZeRO stage: less of the state on each weight replica.
  for (int z = r.parallel.zero_stage + 1; r.parallel.grid.weight_replicas() > 1 && z <= ParallelSection::kMaxZeroStage;
       z++) {
    Recipe a = r;
    a.parallel.zero_stage = z;
    consider(a, "parallel.zero_stage = " + std::to_string(z));
    // With pp > 1 ZeRO-3 keeps each gathered layer for the step by default;
    // dropping it after the forward holds 1 + zero_prefetch units at a time.
    if (z == 3 && !a.parallel.reshard_after_forward) {
      a.parallel.reshard_after_forward = true;
      consider(a, "parallel.zero_stage = 3 with parallel.reshard_after_forward = true");
    }
  }
  if (r.parallel.zero_stage == 3 && r.parallel.grid.weight_replicas() > 1 && !r.parallel.reshard_after_forward) {
    Recipe a = r;
    a.parallel.reshard_after_forward = true;
    consider(a, "parallel.reshard_after_forward = true");
  }
  if (r.training.micro_batch > 1) {
    Recipe a = r;
    a.training.micro_batch = 1;
    if (a.accum_steps() <= Recipe::kMaxAccumSteps)
      consider(a, "training.micro_batch = 1 (global_batch stays; more accumulation)");
  }
  // Twice the ranks on a dimension that splits the model, where the recipe
  // rules take it (the rest of the job as it is), in the ways the recipe
  // gives or, failing that, another way of a dimension (RecipeKey::way_of):
  // twice tp may need the ring where the all-to-all's heads no longer divide.
  for (const GridDim& d : kGridDims) {
    if (!d.doubled) continue;
    Recipe a = r;
    a.parallel.grid.*d.size *= 2;
    a.launch.ranks = 0;  // the job's ranks follow the layout
    std::string how;
    bool valid = ok(a);
    for (const GridDim& other : kGridDims)
      for (const RecipeKey* k : ways_of(other.name))
        for (const std::string& way : k->choices) {
          if (valid) break;
          Recipe b = a;
          k->set(b, KeyValue(way));
          if ((valid = ok(b))) a = b, how = " with " + k->name + " = \"" + way + "\"";
        }
    if (valid)
      consider(a, "parallel." + std::string(d.name) + " = " + std::to_string(a.parallel.grid.*d.size) + how + " (" +
                      d.doubled + ")");
  }
  return out;
}

std::string plan_parts(const MemoryFit& f) {
  std::string parts;
  for (int k = 0; k < kMemKinds; k++)
    if (f.plan.bytes[k] > 0)
      parts += (parts.empty() ? "" : ", ") + std::string(mem_name((Mem)k)) + " " + format_gb(f.plan.bytes[k]);
  if (f.plan.cuda.total() > 0) parts += ", the CUDA backend's own " + format_gb(f.plan.cuda.total());
  return parts;
}

// Host memory: the plan, checkpoint buffers and the process.
std::string host_parts(const MemoryFit& f) {
  std::string parts = plan_parts(f);
  if (f.checkpoint > 0) parts += ", checkpoint buffers " + format_gb(f.checkpoint);
  return parts + ", process " + format_gb(f.process);
}

// On GPUs the plan lives in device memory (checkpoint buffers and the process
// are host memory, plentiful on GPU nodes): compare it with the free memory
// of one GPU, shared by the ranks that land on it.
MemoryFit check_device_fit(const Recipe& r, int stage, bool writer, int ranks_on_node, int local_rank) {
  MemoryFit f = worst(r, stage, writer);
  f.need = f.plan.total();
  const DeviceMemory dev = device_memory(local_rank, ranks_on_node);
  if (dev.devices == 0) {
    f.message = "needs " + format_gb(f.need) + " of GPU memory per rank (" + plan_parts(f) +
                "); no GPU is visible here to compare with";
    return f;
  }
  const int per_gpu = (std::max(1, ranks_on_node) + dev.devices - 1) / dev.devices;
  f.available = (double)dev.free / per_gpu;
  f.fits = f.need <= f.available;
  f.message = "needs " + format_gb(f.need) + " of GPU memory per rank (" + plan_parts(f) + "); " +
              format_gb(f.available) + " available per rank (" + dev.name + ": " + format_gb((double)dev.free) +
              " free of " + format_gb((double)dev.total) + ", shared by " + std::to_string(per_gpu) + " rank(s))";
  if (!f.fits) f.message += ". Try: " + suggestions(r, stage, writer, f.available);
  return f;
}

// Weights, gradients and AdamW state alone (16 bytes a parameter), in
// closed form: a model far too large is refused before the plan is built
// tensor by tensor, which for such a model takes more memory than it checks.
// `where`: what the amount per rank is.
std::optional<MemoryFit> far_too_large(const Recipe& r, double per_rank, const std::string& where) {
  const double split = (double)r.parallel.grid.size_of(kWeightSplitDims);
  const double floor_bytes = 16.0 * stored_matmul_params(r.model) / split;
  if (floor_bytes <= 4.0 * per_rank) return std::nullopt;
  MemoryFit f;
  f.need = floor_bytes, f.available = per_rank, f.fits = false;
  f.message = "needs at least " + format_gb(floor_bytes) +
              " per rank for the weights, gradients and AdamW state alone (" +
              format_gb(16.0 * stored_matmul_params(r.model)) + " over " + grid_names(kWeightSplitDims, " x ") + " = " +
              std::to_string((long)split) + " ranks); " + format_gb(per_rank) +
              " available per rank (" + where +
              "). Try a smaller model (model.n_layers, model.d_model, model.d_ff) or more tensor- and "
              "pipeline-parallel ranks";
  return f;
}

}  // namespace

double checkpoint_file_bytes(const Recipe& r) {
  double most = 0;
  if (!r.checkpoint.saves()) return 0;
  for (int stage = 0; stage < r.parallel.grid.pp; stage++)
    most = std::max(most, need_of(r, stage, true).checkpoint / 2);  // the file image, not the snapshot beside it
  return most;
}


MemoryFit check_memory_fit(const Recipe& r, int stage, bool writer, int ranks_on_node, int local_rank) {
  if (r.runtime.backend == "cuda") return check_device_fit(r, stage, writer, ranks_on_node, local_rank);
  const HostMemory host = host_memory();
  const int share = ranks_on_node > 0 ? ranks_on_node : 1;
  if (host.available > 0)
    if (std::optional<MemoryFit> f = far_too_large(r, (double)host.available / share, host.describe())) return *f;
  MemoryFit f = worst(r, stage, writer);
  f.available = (double)host.available / share;
  f.fits = host.available == 0 || f.need <= f.available;  // unknown: do not block
  f.message = "needs " + format_gb(f.need) + " per rank (" + host_parts(f) + "); " + format_gb(f.available) +
              " available per rank (" + host.describe() + " shared by " + std::to_string(share) +
              " rank(s) on this node)";
  if (!f.fits) f.message += ". Try: " + suggestions(r, stage, writer, f.available);
  return f;
}

MemoryFit check_memory_within(const Recipe& r, int stage, bool writer, double per_rank_bytes) {
  if (std::optional<MemoryFit> f = far_too_large(r, per_rank_bytes, "given")) return *f;
  const bool gpu = r.runtime.backend == "cuda";
  MemoryFit f = worst(r, stage, writer);
  if (gpu) f.need = f.plan.total();  // device memory, as check_device_fit counts it
  f.available = per_rank_bytes;
  f.fits = f.need <= f.available;
  f.message = "needs " + format_gb(f.need) + (gpu ? " of GPU memory" : "") + " per rank (" +
              (gpu ? plan_parts(f) : host_parts(f)) + "); " + format_gb(f.available) + " per rank given";
  if (!f.fits) f.message += ". Try: " + suggestions(r, stage, writer, f.available);
  return f;
}

MemoryFit check_job_memory(const Recipe& r, int ranks_on_node, double per_rank_bytes) {
  return per_rank_bytes > 0 ? check_memory_within(r, -1, true, per_rank_bytes)
                            : check_memory_fit(r, -1, true, ranks_on_node);
}

}  // namespace trainer
