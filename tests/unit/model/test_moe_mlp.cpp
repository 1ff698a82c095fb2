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

// One MoE layer's set-up: its tensors in a registry, its buffers.
struct Block {
  ModelConfig c;
  LayerShape s{};
  RouterSpec router;
  std::vector<size_t> params;
  size_t n = 0;
  Block(bool sigmoid, bool norm) {
    c.arch = Arch::Llama, c.d_model = 8, c.moe.experts = 5, c.moe.top_k = 2, c.moe.expert_ffn = 6;
    c.moe.score = sigmoid ? MoeConfig::Score::Sigmoid : MoeConfig::Score::Softmax, c.moe.norm_topk = norm;
    c.moe.aux_coeff = 0.05, c.moe.z_coeff = 0.01;
    s.B = 2, s.T = s.keys = 4, s.M = s.R = s.B * s.T, s.d = 8, s.E = 5, s.k = 2, s.Fe = 6, s.pairs = s.M * s.k;
    router = {5, 2, sigmoid, norm, 0.05, 0.01};
    ParamRegistry reg;
    params = moe_mlp().add_params(reg, "layers.0.mlp.", c);
    const std::vector<size_t> experts = moe_mlp().add_expert_params(reg, "layers.0.mlp.", c);
    params.insert(params.end(), experts.begin(), experts.end());
    n = reg.total();
  }
};

// The reference: out_t = resid_t + sum_j w_tj SwiGLU_e(in_t), and the loss <out, G> + loss_scale (sum_t a_t + z_t), all in double, the
// experts chosen as `chosen` says (held fixed).
struct Reference {
  const Block& b;
  std::vector<int> chosen;
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
      for (int j = 0; j < k; j++) {
        const int e = chosen[(size_t)t * k + j];
        const double w = s[e] / (b.router.norm_topk ? picked : 1.0);
        const size_t* ep = &b.params[1 + 3 * e];
        std::vector<double> h(F);
        for (int f = 0; f < F; f++) {
          double gate = 0, up = 0;
          for (int i = 0; i < d; i++) {
            gate += p[ep[0] + (size_t)f * d + i] * in[(size_t)t * d + i];
            up += p[ep[1] + (size_t)f * d + i] * in[(size_t)t * d + i];
          }
          h[f] = gate / (1 + std::exp(-gate)) * up;
        }
        for (int i = 0; i < d; i++) {
          double y = 0;
          for (int f = 0; f < F; f++) y += p[ep[2] + (size_t)i * F + f] * h[f];
          o[i] += w * y;
        }
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
    for (const SavedAct& a : moe_mlp().saved(b.s)) saved_buf.push_back(be.alloc(a.elems, DType::F32, Mem::Activations));
    for (size_t n : moe_mlp().scratch(b.s)) scratch_buf.push_back(be.alloc(n, DType::F32, Mem::Temporaries));
    for (size_t n : moe_mlp().scratch32(b.s)) scratch32_buf.push_back(be.alloc(n, DType::F32, Mem::Temporaries));
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
    return {b.params, saved, scratch, &scratch32, &b.router, &route, loss_scale, &sums};
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

TEST(MoeMlp, MatchesADoubleLoopAndItsDerivatives) {
  for (bool sigmoid : {false, true})
    for (bool norm : {false, true}) {
      const Block b(sigmoid, norm);
      const std::string what = std::string(sigmoid ? "sigmoid" : "softmax") + (norm ? " norm_topk" : "");
      const int M = (int)b.s.M, d = (int)b.s.d;
      const std::vector<float> in = randn((size_t)M * d, 1), resid = randn((size_t)M * d, 2),
                               G = randn((size_t)M * d, 3);
      std::vector<float> w = separated_weights(b, in, 10 + 2 * sigmoid + norm), grads(b.n, 0.f);
      BlockRun run(b);
      const float loss_scale = 0.37f;
      std::vector<float> out((size_t)M * d), g_in((size_t)M * d);
      const LayerOps o = run.ops(b, w, grads);
      moe_mlp().forward(o, run.tensors(b, loss_scale), in.data(), out.data(), resid.data(), Upto::Output);
      moe_mlp().backward(o, run.tensors(b, loss_scale), G.data(), in.data(), g_in.data());

      Reference ref{b, std::vector<int>(run.route.routing.expert.begin(), run.route.routing.expert.end()), G,
                    sequence_counts(run.route.routing, (int)b.s.E, 0, (int)b.s.T, (int)b.s.B), loss_scale};
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
    moe_mlp().forward(o, run.tensors(b, 0.5f), in.data(), out.data(), resid.data(), Upto::Output);
    if (rebuild != Upto::Output) {  // what that mode drops, scrambled, then rebuilt
      const RecomputeMode mode = rebuild == Upto::BackwardInputs ? RecomputeMode::Full : RecomputeMode::Selective;
      const SavedActs decl = moe_mlp().saved(b.s);
      for (size_t i = 0; i < decl.size(); i++)
        if (!kept_in(decl[i].kept, mode)) std::fill_n(run.saved[i].f32(), decl[i].elems, 1e9f);
      moe_mlp().forward(o, run.tensors(b, 0.5f), in.data(), Ref(), resid.data(), rebuild);
    }
    moe_mlp().backward(o, run.tensors(b, 0.5f), G.data(), in.data(), g_in.data());
    return run.route.plan.count;
  };
  std::vector<float> grads, g_in, grads2, g_in2;
  const std::vector<int> counts = run_once(Upto::Output, grads, g_in);
  ASSERT_EQ(counts[3], 0);
  const size_t* idle = &b.params[1 + 3 * 3];
  for (size_t i = 0; i < 3; i++)
    EXPECT_TRUE(std::all_of(grads.begin() + idle[i], grads.begin() + idle[i] + b.s.Fe * b.s.d,
                            [](float v) { return v == 0.f; }));
  for (Upto mode : {Upto::BackwardInputs, Upto::DroppedOnly}) {
    run_once(mode, grads2, g_in2);
    EXPECT_EQ(grads2, grads) << (mode == Upto::BackwardInputs ? "full" : "selective");
    EXPECT_EQ(g_in2, g_in) << (mode == Upto::BackwardInputs ? "full" : "selective");
  }
}

}  // namespace
