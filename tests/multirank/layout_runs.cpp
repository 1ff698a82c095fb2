#include "tests/multirank/layout_runs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "parallel/process_grid.h"
#include "runtime/cpu/cpu_backend.h"

namespace trainer::testing {

std::string g_data;
std::map<std::string, std::vector<float>> g_shapes;

std::string layout_name(const Layout& l) {
  return std::string(arch_name(l.arch)) + "_dp" + std::to_string(l.dp) + "_pp" +
         std::to_string(l.pp) + "_tp" + std::to_string(l.tp) + (l.sp ? "_sp" : "") +
         (l.virtual_stages > 1 ? "_v" + std::to_string(l.virtual_stages) : "") +
         (l.cp > 1 ? "_cp" + std::to_string(l.cp) + (l.cp_comm == CpComm::A2a ? "_a2a" : "") : "") + (l.zero_stage ? "_zero1" : "") +
         (l.recompute.mode != RecomputeMode::None ? std::string("_") + recompute_name(l.recompute.mode) : "") +
         (l.precision == DType::BF16 ? "_bf16" : "");
}

Recipe recipe(const Layout& l) {
  Recipe r = default_recipe();
  r.model.arch = l.arch;
  r.model.vocab_size = 256;
  r.model.d_model = 32;
  r.model.n_layers = 4;
  r.model.n_heads = l.arch == Arch::Llama ? 8 : 4;
  r.model.n_kv_heads = 4;
  r.model.d_ff = 64;
  r.model.seq_len = 16;
  r.model.tie_embeddings = l.arch == Arch::GPT2;
  r.training.steps = l.steps;
  r.training.global_batch = 8;
  r.training.micro_batch = 2;
  r.lr.lr = 3e-3f;
  r.lr.min_lr = 3e-4f;
  r.lr.warmup_steps = 2;
  r.parallel.grid = {l.dp, l.pp, l.tp, l.cp};
  r.parallel.cp_comm = l.cp_comm;
  r.parallel.zero_stage = l.zero_stage;
  r.parallel.sequence_parallel = l.sp;
  r.parallel.virtual_stages = l.virtual_stages;
  r.parallel.schedule = l.virtual_stages > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
  r.recompute = l.recompute;
  r.training.precision = l.precision;
  r.data.prefetch = 1;
  r.run.seed = 5;
  return r;
}

namespace {

// Gathers this rank's piece of every gradient to the tensor's global shape.
void global_grads(Backend& be, Transformer& m, ControlComm& tp, std::map<std::string, std::vector<float>>& out) {
  for (const ParamInfo& p : m.registry().all()) {
    if (p.tied_copy) continue;  // the first stage's original stands for it
    const std::vector<float> g = host_copy(be, m.grads().ref(p.offset), p.numel);
    if (p.sharding == Sharding::Replicated) {
      out[p.name] = g;
      continue;
    }
    std::vector<float> all(p.numel * tp.size());
    tp.allgather(g.data(), all.data(), p.numel);
    if (p.sharding == Sharding::Dim0) {
      out[p.name] = all;
      continue;
    }
    const size_t rows = p.shape[0], lc = p.shape[1], gc = lc * tp.size();
    std::vector<float>& dst = out[p.name];
    dst.resize(rows * gc);
    for (int r = 0; r < tp.size(); r++)
      for (size_t i = 0; i < rows; i++)
        std::memcpy(&dst[i * gc + r * lc], &all[(r * rows + i) * lc], lc * sizeof(float));
  }
}

// Every gradient of the model in global shape on every rank of `comm`: the
// pieces of each pipeline stage (from its first dp, cp and tp rank) are summed
// into zero-filled buffers, which copies them exactly.
std::map<std::string, std::vector<float>> model_grads(Backend& be, RankStep& loop, ProcessGrid& grid,
                                                      const std::map<std::string, std::vector<float>>& shapes,
                                                      MPI_Comm comm) {
  std::map<std::string, std::vector<float>> mine;
  for (auto& m : loop.chunks()) global_grads(be, *m, grid.control(ProcessGrid::of("tp")), mine);
  const bool contributes = grid.coords().dp == 0 && grid.coords().cp == 0 && grid.coords().tp == 0;
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, ref] : shapes) {
    std::vector<float>& g = out[name];
    g.assign(ref.size(), 0.f);
    const auto it = mine.find(name);
    if (contributes && it != mine.end()) g = it->second;
    MPI_Allreduce(MPI_IN_PLACE, g.data(), (int)g.size(), MPI_FLOAT, MPI_SUM, comm);
  }
  return out;
}

// ZeRO-1 leaves each rank of dp x cp only its block of the reduced
// gradient: every element is taken from its owner (the tail, which every
// rank holds, from rank 0) and the blocks summed into whole gradients.
void gather_zero_blocks(Backend& be, RankStep& loop, ProcessGrid& grid) {
  ControlComm& replicas = grid.control(ProcessGrid::Replicas);
  const size_t size = replicas.size(), me = replicas.rank();
  for (auto& m : loop.chunks()) {
    const size_t n = m->num_params(), block = n / size;
    std::vector<float> g = host_copy(be, m->grads().ref(), n);
    for (size_t i = 0; i < n; i++)
      if ((i < block * size ? i / block : 0) != me) g[i] = 0.f;
    replicas.allreduce_sum(g.data(), n);
    be.from_host(m->grads().ref(), g.data(), n);
  }
}

}  // namespace

MPI_Comm LayoutGroup::split(MPI_Comm world, int size, int* index) {
  int wrank = 0;
  MPI_Comm_rank(world, &wrank);
  *index = wrank / size;
  MPI_Comm comm;
  MPI_Comm_split(world, *index, wrank, &comm);
  return comm;
}

LayoutGroup::LayoutGroup(const Recipe& recipe, MPI_Comm world)
    : comm_{split(world, recipe.parallel.grid.ranks(), &index_)}, r(recipe), grid(comm_.c, r.parallel.grid),
      ds({g_data}, r.model.seq_len, r.model.vocab_size) {}

Result run(const Layout& l, MPI_Comm world) {
  Result res;
  LayoutGroup g(recipe(l), world);
  {
    const std::unique_ptr<RankStep> grads_only = g.rank_step();
    grads_only->compute_gradients();
    res.grad_norm = std::sqrt(grads_only->grad_sumsq());
    if (g.r.parallel.zero_sharded()) gather_zero_blocks(g.be, *grads_only, g.grid);
    if (g_shapes.empty()) {  // the one-process reference defines the names
      for (auto& m : grads_only->chunks()) global_grads(g.be, *m, g.grid.control(ProcessGrid::of("tp")), g_shapes);
    }
    res.grads = model_grads(g.be, *grads_only, g.grid, g_shapes, g.comm());
    res.params_per_rank = grads_only->model().num_params();
  }
  g.be.reset_memory_peaks();
  const std::unique_ptr<RankStep> loop = g.rank_step();
  res.stage = g.grid.coords().pp;
  for (int s = 0; s < g.r.training.steps; s++) {
    const StepStats st = loop->step();
    res.losses.push_back(st.loss);
    res.comm_tp = st.comm_of("tp");
    res.comm_dp = st.comm_of("dp");
    res.comm_cp = st.comm_of("cp");
  }
  res.memory = g.be.memory();
  return res;
}

void expect_equivalent(const Result& got, const Result& ref, const std::string& what, double loss_rtol) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); i++)
    EXPECT_NEAR(got.losses[i], ref.losses[i], loss_rtol * ref.losses[i]) << what << " step " << i + 1;
  EXPECT_NEAR(got.grad_norm, ref.grad_norm, 1e-5 * ref.grad_norm) << what << " grad norm";
  double gmax = 0;
  for (const auto& [n, g] : ref.grads)
    for (float x : g) gmax = std::max(gmax, (double)std::fabs(x));
  double worst = 0;
  for (const auto& [name, want] : ref.grads) {
    const auto it = got.grads.find(name);
    ASSERT_NE(it, got.grads.end()) << what << ": no gradient " << name;
    ASSERT_EQ(it->second.size(), want.size()) << what << ": " << name;
    double tmax = 0, diff = 0;
    for (size_t i = 0; i < want.size(); i++) {
      tmax = std::max(tmax, (double)std::fabs(want[i]));
      diff = std::max(diff, (double)std::fabs(it->second[i] - want[i]));
    }
    const double rel = diff / std::max(tmax, 1e-3 * gmax);  // floor: exactly-zero gradients
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << what << ": gradient " << name;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("  %-28s loss step %zu %.7f vs %.7f, worst gradient rel err %.2e\n", what.c_str(),
                got.losses.size(), got.losses.back(), ref.losses.back(), worst);
}

void expect_same_bits(const Result& got, const Result& ref, const std::string& what) {
  EXPECT_EQ(got.losses, ref.losses) << what;
  EXPECT_EQ(got.grad_norm, ref.grad_norm) << what;
  for (const auto& [name, g] : ref.grads)
    EXPECT_EQ(0, std::memcmp(g.data(), got.grads.at(name).data(), g.size() * sizeof(float)))
        << what << ": gradient " << name;
}

// bf16 layouts against the one-process bf16 run. Rounding happens at
// different points (a row-parallel sum is rounded after the reduction, a
// pipeline message is already bf16), so the bound is statistical: per
// tensor, the relative Frobenius error of the gradient below 0.08, and the
// losses within 1e-2 relative. A gradient that is zero in exact arithmetic
// (GPT-2's key bias: softmax ignores a constant added to a row's scores) is
// rounding noise in both runs, so the norm it is relative to is at least
// 1e-2 of the model's RMS gradient entry.
void expect_close_bf16(const Result& got, const Result& ref, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); i++)
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-2 * ref.losses[i]) << what << " step " << i + 1;
  double all_sq = 0, all_n = 0;
  for (const auto& [name, want] : ref.grads)
    for (float x : want) all_sq += (double)x * x, all_n++;
  const double rms = std::sqrt(all_sq / std::max(all_n, 1.0));
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, want] : ref.grads) {
    const auto it = got.grads.find(name);
    ASSERT_NE(it, got.grads.end()) << what << ": no gradient " << name;
    ASSERT_EQ(it->second.size(), want.size()) << what << ": " << name;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); i++) {
      diff += std::pow((double)it->second[i] - want[i], 2);
      norm += std::pow((double)want[i], 2);
    }
    const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-2 * rms * std::sqrt((double)want.size()));
    if (rel > worst) worst = rel, worst_name = name;
    EXPECT_LT(rel, 0.08) << what << ": gradient " << name;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("  %-28s loss step %zu %.5f vs %.5f, worst gradient rel Frobenius err %.2e (%s)\n", what.c_str(),
                got.losses.size(), got.losses.back(), ref.losses.back(), worst, worst_name.c_str());
}


}  // namespace trainer::testing
