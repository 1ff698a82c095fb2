#include "app/memory_fit.h"

#include <cstdio>

#include "engine/layout.h"
#include "runtime/host_memory.h"

namespace trainer {

namespace {

constexpr double kProcessBytes = 150e6;  // libraries, MPI and HDF5 buffers, loader: measured ~100-130 MB here

// Need of one stage: the plan, checkpoint buffers, the process.
MemoryFit need_of(const Recipe& r, int stage, bool writer) {
  MemoryFit f;
  f.plan = plan_memory(r.model, rank_layout(r, stage), r.recompute);
  // A checkpoint writer copies its fp32 state (master weights + AdamW m, v:
  // three times the fp32 gradients' size) to a host snapshot, then builds
  // its file from it in memory: twice the state, blocking or async.
  const double state = f.plan.bytes[(int)Mem::Grads] * 3;
  if (r.checkpoint.every > 0 && writer) f.checkpoint = state * 2;
  f.process = kProcessBytes;
  f.need = f.plan.total() + f.checkpoint + f.process;
  return f;
}

MemoryFit worst(const Recipe& r, int stage, bool writer) {
  if (stage >= 0) return need_of(r, stage, writer);
  MemoryFit w;
  for (int s = 0; s < r.grid.pp; s++)
    if (MemoryFit f = need_of(r, s, writer); f.need > w.need) w = f;
  return w;
}

std::string gb(double b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GB", b / 1e9);
  return s;
}

// Changes that would bring the need under `avail`, each with its need.
std::string suggestions(const Recipe& r, int stage, bool writer, double avail) {
  std::string out;
  auto consider = [&](Recipe alt, const std::string& what) {
    const double n = worst(alt, stage < 0 || stage >= alt.grid.pp ? -1 : stage, writer).need;
    out += (out.empty() ? "" : "; ") + what + " (" + gb(n) + (n <= avail ? ", fits)" : ")");
  };
  if (r.recompute.mode != RecomputeMode::Full || r.recompute.layers > 0) {
    Recipe a = r;
    a.recompute = {RecomputeMode::Full, -1};
    consider(a, "recompute.mode = \"full\"");
  }
  if (r.training.micro_batch > 1) {
    Recipe a = r;
    a.training.micro_batch = 1;
    consider(a, "training.micro_batch = 1 (global_batch stays; more accumulation)");
  }
  if (validate_tp(r.model, r.grid.tp * 2).empty()) {
    Recipe a = r;
    a.grid.tp *= 2;
    consider(a, "parallel.tp = " + std::to_string(a.grid.tp) + " (twice the ranks per model copy)");
  }
  if (r.model.n_layers % (r.grid.pp * 2 * r.virtual_stages) == 0) {
    Recipe a = r;
    a.grid.pp *= 2;
    consider(a, "parallel.pp = " + std::to_string(a.grid.pp) + " (twice the ranks per model copy)");
  }
  return out;
}

}  // namespace

MemoryFit check_memory_fit(const Recipe& r, int stage, bool writer, int ranks_on_node) {
  MemoryFit f = worst(r, stage, writer);
  const HostMemory host = host_memory();
  const int share = ranks_on_node > 0 ? ranks_on_node : 1;
  f.available = (double)host.available / share;
  f.fits = host.available == 0 || f.need <= f.available;  // unknown: do not block
  std::string parts;
  for (int k = 0; k < kMemKinds; k++)
    if (f.plan.bytes[k] > 0) parts += (parts.empty() ? "" : ", ") + std::string(mem_name((Mem)k)) + " " + gb(f.plan.bytes[k]);
  if (f.checkpoint > 0) parts += ", checkpoint buffers " + gb(f.checkpoint);
  parts += ", process " + gb(f.process);
  f.message = "needs " + gb(f.need) + " per rank (" + parts + "); " + gb(f.available) + " available per rank (" +
              host.describe() + " shared by " + std::to_string(share) + " rank(s) on this node)";
  if (!f.fits) f.message += ". Try: " + suggestions(r, stage, writer, f.available);
  return f;
}

}  // namespace trainer
