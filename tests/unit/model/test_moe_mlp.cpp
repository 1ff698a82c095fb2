// The Mixture-of-Experts MLP block (model/layer/moe_mlp.cpp) on the CPU
// backend against a plain double-precision implementation written here:
// the forward's output, and every gradient (input, router, experts) against
// central differences of the loss the backward belongs to, <out, G> plus the
// router's balancing and z-losses; an expert without rows gets none; and
// full and selective recomputation rebuild the same backward bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "model/layer/mlp.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/support/reference_math.h"

using namespace trainer;

namespace {

using test_support::randn;

// One MoE layer's set-up: its tensors in a registry, its buffers. shared:
// the shared expert's hidden width (0: none); capacity: the capacity factor.
struct Block {
  ModelConfig c;
  LayerShape s{};
  RouterSpec router;
  std::vector<size_t> params;
  size_t n = 0;
  int first_expert;  // in params: after the router's (and the shared expert's)
  const Mlp& mlp;
  Block(bool sigmoid, bool norm, int shared = 0, double capacity = 0) : mlp(moe_mlp(shared > 0, false)) {
    c.arch = Arch::Llama, c.d_model = 8, c.moe.experts = 5, c.moe.top_k = 2, c.moe.expert_ffn = 6;
    c.moe.score = sigmoid ? MoeConfig::Score::Sigmoid : MoeConfig::Score::Softmax, c.moe.norm_topk = norm;
    c.moe.aux_coeff = 0.05, c.moe.z_coeff = 0.01, c.moe.shared_expert_ffn = shared;
    s.B = 2, s.T = s.keys = 4, s.M = s.R = s.B * s.T, s.d = 8, s.E = 5, s.k = 2, s.Fe = 6, s.pairs = s.M * s.k;
    s.Fs = shared;
    router = {5, 2, sigmoid, norm, 0.05, 0.01, capacity};
    ParamRegistry reg;
    params = mlp.add_params(reg, "layers.0.mlp.", c);
    first_expert = (int)params.size();
    const std::vector<size_t> experts = mlp.add_expert_params(reg, "layers.0.mlp.", c, 0, 5);
    params.insert(params.end(), experts.begin(), experts.end());
    n = reg.total();
  }
};

// Each pair (t, j) whether its expert took it: an expert takes the first
// `capacity` pairs that chose it, in pair order (0: all).
std::vector<bool> kept_pairs(const std::vector<int>& chosen, int experts, int capacity) {
  std::vector<int> taken(experts, 0);
  std::vector<bool> kept(chosen.size());
  for (size_t p = 0; p < chosen.size(); p++) kept[p] = capacity == 0 || taken[chosen[p]]++ < capacity;
  return kept;
}

// SwiGLU in double: out[d] += W_down silu(W_gate x) * (W_up x), the
// matrices at p[gate], p[up] ([F, d]) and p[down] ([d, F]), times w.
void swiglu_ref(const std::vector<double>& p, size_t gate, size_t up, size_t down, int F, int d, const double* x,
                double w, double* out) {
  std::vector<double> h(F);
  for (int f = 0; f < F; f++) {
    double g = 0, u = 0;
    for (int i = 0; i < d; i++) g += p[gate + (size_t)f * d + i] * x[i], u += p[up + (size_t)f * d + i] * x[i];
    h[f] = g / (1 + std::exp(-g)) * u;
  }
  for (int i = 0; i < d; i++) {
    double y = 0;
    for (int f = 0; f < F; f++) y += p[down + (size_t)i * F + f] * h[f];
    out[i] += w * y;
  }
}

// The reference: out_t = resid_t + SwiGLU_shared(in_t) + sum over the kept
// pairs j of w_tj SwiGLU_e(in_t), and the loss <out, G> + loss_scale (sum_t
// a_t + z_t), all in double, the experts chosen as `chosen` says and the
// pairs kept as `kept` (held fixed).
struct Reference {
  const Block& b;
  std::vector<int> chosen;
  std::vector<bool> kept;
  std::vector<float> G, counts;
  double loss_scale;
  // p: the flat parameters; in, resid: [M, d].
  double loss(const std::vector<double>& p, const std::vector<double>& in, const std::vector<double>& resid,
              std::vector<double>* out_rows = nullptr) const {
    const int M = (int)b.s.M, d = (int)b.s.d, E = (int)b.s.E, k = (int)b.s.k, F = (int)b.s.Fe;
    double J = 0;
    if (out_rows) out_rows->assign((size_t)M * d, 0.0);
    for (int t = 0; t < M; t++) {
      std::vector<double> l(E), s(E);
      for (int e = 0; e < E; e++)
        for (int i = 0; i < d; i++) l[e] += in[(size_t)t * d + i] * p[b.params[0] + (size_t)e * d + i];
      const double mx = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (int e = 0; e < E; e++) sum += std::exp(l[e] - mx);
      const double lse = mx + std::log(sum);
      for (int e = 0; e < E; e++) s[e] = b.router.sigmoid ? 1 / (1 + std::exp(-l[e])) : std::exp(l[e] - lse);
      double picked = 0, total = 0;
      for (int j = 0; j < k; j++) picked += s[chosen[(size_t)t * k + j]];
      for (double x : s) total += x;
      std::vector<double> o(d);
      for (int i = 0; i < d; i++) o[i] = resid[(size_t)t * d + i];
      const double* x = &in[(size_t)t * d];
      if (b.s.Fs) swiglu_ref(p, b.params[1], b.params[2], b.params[3], (int)b.s.Fs, d, x, 1.0, o.data());
      for (int j = 0; j < k; j++) {
        if (!kept[(size_t)t * k + j]) continue;
        const int e = chosen[(size_t)t * k + j];
        const double w = s[e] / (b.router.norm_topk ? picked : 1.0);
        const size_t* ep = &b.params[b.first_expert + 3 * e];
        swiglu_ref(p, ep[0], ep[1], ep[2], F, d, x, w, o.data());
      }
      for (int i = 0; i < d; i++) {
        J += o[i] * G[(size_t)t * d + i];
        if (out_rows) (*out_rows)[(size_t)t * d + i] = o[i];
      }
      const int seq = t / (int)b.s.T;
      double a = 0;
      for (int e = 0; e < E; e++)
        a += b.router.aux_coeff * E / ((double)k * b.s.T) * counts[(size_t)seq * E + e] * s[e] /
             (b.router.sigmoid ? total : 1.0);
      J += loss_scale * (a + b.router.z_coeff * lse * lse);
    }
    return J;
  }
};

// The block's buffers, as the model carves them.
struct BlockRun {
  CpuBackend be{1};
  std::vector<Buffer> saved_buf, scratch_buf, scratch32_buf;
  std::vector<Ref> saved, scratch;
  std::vector<float*> scratch32;
  MoeRoute route;
  RouterStepSums sums;
  explicit BlockRun(const Block& b) {
    for (const SavedAct& a : b.mlp.saved(b.s)) saved_buf.push_back(be.alloc(a.elems, DType::F32, Mem::Activations));
    for (size_t n : b.mlp.scratch(b.s)) scratch_buf.push_back(be.alloc(n, DType::F32, Mem::Temporaries));
    for (size_t n : b.mlp.scratch32(b.s)) scratch32_buf.push_back(be.alloc(n, DType::F32, Mem::Temporaries));
    for (Buffer& x : saved_buf) saved.push_back(x.ref());
    for (Buffer& x : scratch_buf) scratch.push_back(x.ref());
    for (Buffer& x : scratch32_buf) scratch32.push_back(x.ref().f32());
  }
  LayerOps ops(const Block& b, std::vector<float>& w, std::vector<float>& g) {
    LayerOps o;
    o.be = &be, o.shape = b.s, o.weights = w.data(), o.grads = g.data();
    return o;
  }
  MlpTensors tensors(const Block& b, float loss_scale) {
    return {b.params, saved, scratch, &scratch32, &b.router, &route, nullptr, loss_scale, &sums};
  }
};

// Router weights whose every row's k-th and (k+1)-th scores stand apart,
// so that the differences never change the choice.
std::vector<float> separated_weights(const Block& b, const std::vector<float>& in, unsigned seed) {
  const int M = (int)b.s.M, d = (int)b.s.d, E = (int)b.s.E, k = (int)b.s.k;
  for (unsigned tries = 0;; tries++) {
    std::vector<float> w = randn(b.n, seed + 104729 * tries, 0.4f);
    bool ok = true;
    for (int t = 0; t < M && ok; t++) {
      std::vector<double> l(E);
      for (int e = 0; e < E; e++)
        for (int i = 0; i < d; i++) l[e] += (double)in[(size_t)t * d + i] * w[b.params[0] + (size_t)e * d + i];
      std::vector<double> s(E);
      const double mx = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (int e = 0; e < E; e++) sum += std::exp(l[e] - mx);
      for (int e = 0; e < E; e++) s[e] = b.router.sigmoid ? 1 / (1 + std::exp(-l[e])) : std::exp(l[e] - mx) / sum;
      std::sort(s.rbegin(), s.rend());
      ok = s[k - 1] - s[k] > 2e-2;
    }
    if (ok) return w;
  }
}

// Softmax and sigmoid scores, with and without norm_topk; with a shared
// expert; with a capacity that drops pairs (5 experts take at most 2 of 16).
TEST(MoeMlp, MatchesADoubleLoopAndItsDerivatives) {
  struct Case {
    bool sigmoid, norm;
    int shared;
    double capacity;
  };
  for (const Case& cs : {Case{false, false, 0, 0}, Case{false, true, 0, 0}, Case{true, false, 0, 0},
                         Case{true, true, 0, 0}, Case{false, true, 4, 0}, Case{true, true, 4, 0.5}}) {
      const bool sigmoid = cs.sigmoid, norm = cs.norm;
      const Block b(sigmoid, norm, cs.shared, cs.capacity);
      const std::string what = std::string(sigmoid ? "sigmoid" : "softmax") + (norm ? " norm_topk" : "") +
                               (cs.shared ? " shared" : "") + (cs.capacity > 0 ? " capacity" : "");
      const int M = (int)b.s.M, d = (int)b.s.d;
      const std::vector<float> in = randn((size_t)M * d, 1), resid = randn((size_t)M * d, 2),
                               G = randn((size_t)M * d, 3);
      std::vector<float> w = separated_weights(b, in, 10 + 2 * sigmoid + norm), grads(b.n, 0.f);
      BlockRun run(b);
      const float loss_scale = 0.37f;
      std::vector<float> out((size_t)M * d), g_in((size_t)M * d);
      const LayerOps o = run.ops(b, w, grads);
      b.mlp.forward(o, run.tensors(b, loss_scale), in.data(), out.data(), resid.data(), Upto::Output);
      b.mlp.backward(o, run.tensors(b, loss_scale), G.data(), in.data(), g_in.data());

      const std::vector<int> chosen_ids(run.route.routing.expert.begin(), run.route.routing.expert.end());
      const std::vector<bool> kept = kept_pairs(chosen_ids, (int)b.s.E, b.router.capacity(M));
      Reference ref{b, chosen_ids, kept, G,
                    sequence_counts(run.route.routing, (int)b.s.E, 0, (int)b.s.T, (int)b.s.B), loss_scale};
      if (cs.capacity > 0) ASSERT_GT(std::count(kept.begin(), kept.end(), false), 0) << what << ": nothing dropped";
      EXPECT_EQ(run.sums.dropped, (double)std::count(kept.begin(), kept.end(), false)) << what;
      const std::vector<double> p(w.begin(), w.end()), x(in.begin(), in.end()), r(resid.begin(), resid.end());
      std::vector<double> want_out;
      const double J = ref.loss(p, x, r, &want_out);
      double scale = 0;
      for (double v : want_out) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < out.size(); i++) ASSERT_NEAR(out[i], want_out[i], 1e-5 * scale) << what << " out " << i;
      // The router's losses the backward summed: J's part beyond <out, G>.
      double inner = 0;
      for (size_t i = 0; i < out.size(); i++) inner += want_out[i] * G[i];
      EXPECT_NEAR(loss_scale * (run.sums.losses.aux + run.sums.losses.z), J - inner, 1e-6 * std::fabs(J - inner) + 1e-9)
          << what;
      std::vector<double> chosen(b.s.E, 0.0);
      for (int e : ref.chosen) chosen[e] += 1;
      EXPECT_EQ(run.sums.selections, chosen) << what;

      // Central differences of the reference over every input and parameter.
      using test_support::central_differences;
      const std::vector<double> want_gin =
          central_differences([&](const std::vector<double>& y) { return ref.loss(p, y, r); }, x, 1e-5);
      const std::vector<double> want_gp =
          central_differences([&](const std::vector<double>& q) { return ref.loss(q, x, r); }, p, 1e-5);
      const auto check = [&](const std::vector<float>& got, const std::vector<double>& want, const char* name) {
        double mx = 0;
        for (double v : want) mx = std::max(mx, std::fabs(v));
        for (size_t i = 0; i < got.size(); i++) ASSERT_NEAR(got[i], want[i], 2e-4 * mx) << what << " " << name << " " << i;
      };
      check(g_in, want_gin, "input gradient");
      check(grads, want_gp, "parameter gradient");
  }
}

// Experts that no row chooses get no gradient at all, and the backward is
// the same after full or selective recomputation rebuilt what it dropped.
TEST(MoeMlp, IdleExpertsGetNothingAndRecomputationIsExact) {
  const Block b(false, true);
  const int M = (int)b.s.M, d = (int)b.s.d, E = (int)b.s.E;
  std::vector<float> in = randn((size_t)M * d, 5), w = randn(b.n, 8, 0.3f);
  const std::vector<float> resid = randn((size_t)M * d, 6), G = randn((size_t)M * d, 7);
  // Every row's first feature 4, every router row's first weight 3 but
  // expert 3's 0: its logit is 12 below the others', never in the top 2.
  for (int t = 0; t < M; t++) in[(size_t)t * d] = 4.f;
  for (int e = 0; e < E; e++) w[b.params[0] + (size_t)e * d] = e == 3 ? 0.f : 3.f;
  const auto run_once = [&](Upto rebuild, std::vector<float>& grads, std::vector<float>& g_in) {
    BlockRun run(b);
    grads.assign(b.n, 0.f), g_in.assign((size_t)M * d, 0.f);
    const LayerOps o = run.ops(b, w, grads);
    std::vector<float> out((size_t)M * d);
    b.mlp.forward(o, run.tensors(b, 0.5f), in.data(), out.data(), resid.data(), Upto::Output);
    if (rebuild != Upto::Output) {  // what that mode drops, scrambled, then rebuilt
      const RecomputeMode mode = rebuild == Upto::BackwardInputs ? RecomputeMode::Full : RecomputeMode::Selective;
      const SavedActs decl = b.mlp.saved(b.s);
      for (size_t i = 0; i < decl.size(); i++)
        if (!kept_in(decl[i].kept, mode)) std::fill_n(run.saved[i].f32(), decl[i].elems, 1e9f);
      b.mlp.forward(o, run.tensors(b, 0.5f), in.data(), Ref(), resid.data(), rebuild);
    }
    b.mlp.backward(o, run.tensors(b, 0.5f), G.data(), in.data(), g_in.data());
    return run.route.plan.count;
  };
  std::vector<float> grads, g_in, grads2, g_in2;
  const std::vector<int> counts = run_once(Upto::Output, grads, g_in);
  ASSERT_EQ(counts[3], 0);
  const size_t* idle = &b.params[b.first_expert + 3 * 3];
  for (size_t i = 0; i < 3; i++)
    EXPECT_TRUE(std::all_of(grads.begin() + idle[i], grads.begin() + idle[i] + b.s.Fe * b.s.d,
                            [](float v) { return v == 0.f; }));
  for (Upto mode : {Upto::BackwardInputs, Upto::DroppedOnly}) {
    run_once(mode, grads2, g_in2);
    EXPECT_EQ(grads2, grads) << (mode == Upto::BackwardInputs ? "full" : "selective");
    EXPECT_EQ(g_in2, g_in) << (mode == Upto::BackwardInputs ? "full" : "selective");
  }
}

// Capacity: no expert computes more rows than its capacity; a row whose
// pairs were all dropped leaves the block as its residual, bit for bit (its
// input gradient from the experts is 0: only the router's); and a capacity
// that drops nothing (factor E / k: every expert may take every row) gives
// the dropless block's output and gradients bit for bit.
TEST(MoeMlp, CapacityDropsPairsAndAddsNothingForThem) {
  const int M = 8, d = 8;
  const std::vector<float> in = randn((size_t)M * d, 21), resid = randn((size_t)M * d, 22), G = randn((size_t)M * d, 23);
  const auto run_block = [&](double capacity, std::vector<float>& out, std::vector<float>& grads, std::vector<float>& g_in,
                             MoeRoute* route = nullptr) {
    const Block b(false, true, 0, capacity);
    std::vector<float> w = randn(b.n, 24, 0.4f);
    BlockRun run(b);
    grads.assign(b.n, 0.f), out.assign((size_t)M * d, 0.f), g_in.assign((size_t)M * d, 0.f);
    const LayerOps o = run.ops(b, w, grads);
    b.mlp.forward(o, run.tensors(b, 0.5f), in.data(), out.data(), resid.data(), Upto::Output);
    b.mlp.backward(o, run.tensors(b, 0.5f), G.data(), in.data(), g_in.data());
    if (route) *route = run.route;
  };
  std::vector<float> out, grads, g_in, out0, grads0, g_in0;
  MoeRoute route;
  run_block(0.3, out, grads, g_in, &route);  // capacity ceil(0.3 x 2 x 8 / 5) = 1
  int all_dropped = 0;
  for (int e = 0; e < 5; e++) EXPECT_LE(route.plan.count[e], 1) << "expert " << e;
  EXPECT_EQ(route.plan.dropped, 2 * M - route.plan.kept);
  for (int t = 0; t < M; t++) {
    if (route.plan.slot_of_pair[2 * t] >= 0 || route.plan.slot_of_pair[2 * t + 1] >= 0) continue;
    all_dropped++;
    for (int i = 0; i < d; i++) EXPECT_EQ(out[(size_t)t * d + i], resid[(size_t)t * d + i]) << "row " << t;
  }
  EXPECT_GT(all_dropped, 0) << "no row lost all its pairs";
  run_block(0, out0, grads0, g_in0);
  run_block(5.0 / 2, out, grads, g_in);
  EXPECT_EQ(out, out0);
  EXPECT_EQ(grads, grads0);
  EXPECT_EQ(g_in, g_in0);
}

}  // namespace
