// Mixture-of-Experts routing (model/layer/moe_routing.h) against references
// written here in double precision: the choice of experts and weights
// against a sort, the dispatch plan's invariants, and the router's logit
// gradient against central differences of the loss it belongs to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "model/layer/moe_routing.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/support/reference_math.h"

using namespace trainer;

namespace {

using test_support::randn;

// Scores of one row in double: softmax or elementwise sigmoid.
std::vector<double> scores(const RouterSpec& s, const double* l) {
  const int E = s.experts;
  std::vector<double> out(E);
  if (s.sigmoid) {
    for (int i = 0; i < E; i++) out[i] = 1 / (1 + std::exp(-l[i]));
    return out;
  }
  double m = *std::max_element(l, l + E), sum = 0;
  for (int i = 0; i < E; i++) sum += out[i] = std::exp(l[i] - m);
  for (double& x : out) x /= sum;
  return out;
}

double logsumexp(const double* l, int E) {
  double m = *std::max_element(l, l + E), sum = 0;
  for (int i = 0; i < E; i++) sum += std::exp(l[i] - m);
  return m + std::log(sum);
}

// The experts of a row by a stable sort of s + bias, best first.
std::vector<int> top_k(const std::vector<double>& s, const float* bias, int k) {
  std::vector<int> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return s[a] + (bias ? bias[a] : 0.0) > s[b] + (bias ? bias[b] : 0.0);
  });
  order.resize(k);
  return order;
}

// The loss the router's gradient belongs to, in double, for logits l and the
// experts `chosen` (held fixed): sum over pairs of dweight x weight, plus
// loss_scale x (sum_t a_t + z_t) with the balancing counts held fixed.
double router_loss(const RouterSpec& s, const std::vector<double>& l, const std::vector<int>& chosen,
                   const std::vector<float>& dweight, const std::vector<float>& counts, int seq_rows,
                   double loss_scale) {
  const int E = s.experts, k = s.top_k, rows = (int)(l.size() / E);
  double J = 0;
  for (int t = 0; t < rows; t++) {
    const std::vector<double> sc = scores(s, &l[(size_t)t * E]);
    double chosen_sum = 0;
    for (int j = 0; j < k; j++) chosen_sum += sc[chosen[(size_t)t * k + j]];
    for (int j = 0; j < k; j++) {
      const double w = sc[chosen[(size_t)t * k + j]] / (s.norm_topk ? chosen_sum : 1.0);
      J += dweight[(size_t)t * k + j] * w;
    }
    double total = 0;
    for (double x : sc) total += x;
    const int b = t / seq_rows;
    double a = 0;
    for (int i = 0; i < E; i++) {
      const double f = (double)E / (k * seq_rows) * counts[(size_t)b * E + i];
      a += s.aux_coeff * f * sc[i] / (s.sigmoid ? total : 1.0);
    }
    const double lse = logsumexp(&l[(size_t)t * E], E);
    J += loss_scale * (a + s.z_coeff * lse * lse);
  }
  return J;
}

// Logits whose every row has its k-th and (k+1)-th best scores apart, so
// that the differences never change the choice.
std::vector<float> separated_logits(const RouterSpec& s, int rows, unsigned seed) {
  for (unsigned tries = 0;; tries++) {
    std::vector<float> l = randn((size_t)rows * s.experts, seed + 7919 * tries, 1.5f);
    bool ok = true;
    for (int t = 0; t < rows && ok; t++) {
      const std::vector<double> d(l.begin() + (size_t)t * s.experts, l.begin() + (size_t)(t + 1) * s.experts);
      std::vector<double> sc = scores(s, d.data());
      std::sort(sc.rbegin(), sc.rend());
      ok = sc[s.top_k - 1] - sc[s.top_k] > 1e-2;
    }
    if (ok) return l;
  }
}

TEST(MoeRouting, ChoosesTheTopScoresAndWeighsThem) {
  for (bool sigmoid : {false, true})
    for (bool norm : {false, true}) {
      RouterSpec s{8, 3, sigmoid, norm};
      const int rows = 40;
      std::vector<float> l = randn((size_t)rows * s.experts, 3);
      for (int i = 0; i < s.experts; i++) l[i] = 0.25f;  // row 0: all tied: experts 0, 1, 2
      const std::vector<float> bias = randn(s.experts, 11, 0.05f);
      for (const float* b : {(const float*)nullptr, bias.data()}) {
        const Routing r = route(s, l.data(), b, rows);
        for (int t = 0; t < rows; t++) {
          const std::vector<double> d(l.begin() + (size_t)t * s.experts, l.begin() + (size_t)(t + 1) * s.experts);
          const std::vector<double> sc = scores(s, d.data());
          const std::vector<int> want = top_k(sc, b, s.top_k);
          double sum = 0;
          for (int e : want) sum += sc[e];
          for (int j = 0; j < s.top_k; j++) {
            ASSERT_EQ(r.expert[(size_t)t * s.top_k + j], want[j]) << "row " << t;
            // The bias chooses, never weighs.
            EXPECT_NEAR(r.weight[(size_t)t * s.top_k + j], sc[want[j]] / (norm ? sum : 1.0), 1e-6) << "row " << t;
          }
        }
        if (!b) {
          EXPECT_EQ(r.expert[0], 0);
          EXPECT_EQ(r.expert[1], 1);
          EXPECT_EQ(r.expert[2], 2);
        }
      }
    }
}

TEST(MoeRouting, DispatchPutsEachExpertsPairsInOrderAndDropsPastCapacity) {
  RouterSpec s{6, 2};
  const int rows = 30;
  std::vector<float> l = randn((size_t)rows * s.experts, 5);
  for (int t = 0; t < rows; t++) l[(size_t)t * s.experts + 4] = l[(size_t)t * s.experts + 5] = -50.f;  // never chosen
  const Routing r = route(s, l.data(), nullptr, rows);
  for (int capacity : {0, 7, 3}) {
    const Dispatch d = dispatch(r, s.experts, capacity);
    EXPECT_EQ(d.count[4], 0);
    EXPECT_EQ(d.count[5], 0);
    std::vector<int> taken(s.experts, 0);
    int kept = 0, dropped = 0;
    std::vector<int> last_slot(s.experts, -1);
    for (size_t p = 0; p < r.expert.size(); p++) {
      const int e = r.expert[p];
      const bool fits = capacity == 0 || taken[e] < capacity;
      if (!fits) {
        EXPECT_EQ(d.slot_of_pair[p], -1) << "pair " << p;
        dropped++;
        continue;
      }
      taken[e]++, kept++;
      const int slot = d.slot_of_pair[p];
      ASSERT_GE(slot, d.offset[e]);
      ASSERT_LT(slot, d.offset[e] + d.count[e]);
      EXPECT_GT(slot, last_slot[e]) << "an expert's pairs in pair order";
      last_slot[e] = slot;
      EXPECT_EQ(d.row_of_slot[slot], (int)(p / s.top_k));
    }
    for (int e = 0; e < s.experts; e++) {
      EXPECT_EQ(d.count[e], taken[e]);
      if (capacity) EXPECT_LE(d.count[e], capacity);
    }
    EXPECT_EQ(d.kept, kept);
    EXPECT_EQ(d.dropped, dropped);
    if (capacity == 3) EXPECT_GT(dropped, 0);
  }
}

// dlogits against central differences of router_loss, for both scores,
// with and without renormalised weights, balancing and z-loss on; the sums
// of a_t and z_t against the reference's.
TEST(MoeRouting, LogitGradientIsTheLossesDerivative) {
  for (bool sigmoid : {false, true})
    for (bool norm : {false, true}) {
      RouterSpec s{5, 2, sigmoid, norm, 0.03, 0.002};
      const int seq_rows = 4, sequences = 3, rows = seq_rows * sequences;
      const std::vector<float> l = separated_logits(s, rows, 21 + 2 * sigmoid + norm);
      const Routing r = route(s, l.data(), nullptr, rows);
      const std::vector<float> dweight = randn(r.expert.size(), 8);
      const std::vector<float> counts = sequence_counts(r, s.experts, 0, seq_rows, sequences);
      const float loss_scale = 0.7f;
      std::vector<float> dl(l.size());
      const RouterLossSums sums = router_backward(s, l.data(), r, dweight.data(), counts, 0, seq_rows, seq_rows,
                                                  loss_scale, dl.data());
      std::vector<double> x(l.begin(), l.end());
      const std::vector<int> chosen(r.expert.begin(), r.expert.end());
      const auto J = [&](const std::vector<double>& y) {
        return router_loss(s, y, chosen, dweight, counts, seq_rows, loss_scale);
      };
      const std::vector<double> want = test_support::central_differences(J, x, 1e-6);
      double scale = 0;
      for (double v : want) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < x.size(); i++)
        ASSERT_NEAR(dl[i], want[i], 1e-5 * scale + 1e-5 * std::fabs(want[i]))
            << (sigmoid ? "sigmoid" : "softmax") << (norm ? " norm_topk" : "") << " logit " << i;
      // The loss terms: J with no weight gradient and unit scale is their sum.
      const std::vector<float> none(dweight.size(), 0.f);
      const double both = router_loss(s, x, chosen, none, counts, seq_rows, 1.0);
      EXPECT_NEAR(sums.aux + sums.z, both, 1e-9 * std::fabs(both));
    }
}

// Equal logits: every probability 1/E, so the balancing loss is aux_coeff
// whatever the counts, and the z-loss z_coeff (log E)^2 a row.
TEST(MoeRouting, EqualLogitsGiveTheCoefficients) {
  RouterSpec s{8, 2, false, true, 0.01, 0.001};
  const int rows = 6;
  const std::vector<float> l((size_t)rows * s.experts, 0.f);
  const Routing r = route(s, l.data(), nullptr, rows);
  const std::vector<float> counts = sequence_counts(r, s.experts, 0, rows, 1);
  std::vector<float> dl(l.size());
  const std::vector<float> none(r.expert.size(), 0.f);
  const RouterLossSums sums = router_backward(s, l.data(), r, none.data(), counts, 0, rows, rows, 1.f, dl.data());
  EXPECT_NEAR(sums.aux / rows, 0.01, 1e-12);
  EXPECT_NEAR(sums.z / rows, 0.001 * std::log(8.0) * std::log(8.0), 1e-12);
}

// Rows cut among ranks (tensor or context parallelism, row0 > 0), with the
// counts summed over the cuts: the same gradient and sums as all the rows
// at once, so no split changes the losses.
TEST(MoeRouting, SplittingTheRowsChangesNothing) {
  RouterSpec s{6, 2, false, false, 0.02, 0.001};
  const int seq_rows = 8, sequences = 2, rows = seq_rows * sequences;
  const std::vector<float> l = randn((size_t)rows * s.experts, 4);
  const std::vector<float> dweight = randn((size_t)rows * s.top_k, 9);
  const Routing whole = route(s, l.data(), nullptr, rows);
  const std::vector<float> counts = sequence_counts(whole, s.experts, 0, seq_rows, sequences);
  std::vector<float> dl_whole(l.size());
  const RouterLossSums all =
      router_backward(s, l.data(), whole, dweight.data(), counts, 0, seq_rows, seq_rows, 0.5f, dl_whole.data());
  for (int parts : {2, 4}) {
    const int n = rows / parts;
    std::vector<Routing> cut;
    std::vector<float> summed((size_t)sequences * s.experts, 0.f);
    for (int p = 0; p < parts; p++) {
      cut.push_back(route(s, l.data() + (size_t)p * n * s.experts, nullptr, n));
      const std::vector<float> c = sequence_counts(cut.back(), s.experts, p * n, seq_rows, sequences);
      for (size_t i = 0; i < c.size(); i++) summed[i] += c[i];
    }
    EXPECT_EQ(summed, counts);
    RouterLossSums sums;
    std::vector<float> dl(l.size());
    for (int p = 0; p < parts; p++) {
      const RouterLossSums got =
          router_backward(s, l.data() + (size_t)p * n * s.experts, cut[p], dweight.data() + (size_t)p * n * s.top_k,
                          summed, p * n, seq_rows, seq_rows, 0.5f, dl.data() + (size_t)p * n * s.experts);
      sums.aux += got.aux, sums.z += got.z;
    }
    EXPECT_EQ(dl, dl_whole) << parts << " parts";
    EXPECT_NEAR(sums.aux, all.aux, 1e-12);
    EXPECT_NEAR(sums.z, all.z, 1e-12);
  }
  // Context parallelism's cut: each part holds a share of every sequence
  // (seq_rows / parts of its rows), sequence after sequence.
  for (int parts : {2, 4}) {
    const int h = seq_rows / parts;
    const auto row_of = [&](int p, int i) { return (i / h) * seq_rows + p * h + i % h; };  // part p's row i
    std::vector<std::vector<float>> logits(parts), dweights(parts);
    std::vector<Routing> cut;
    std::vector<float> summed((size_t)sequences * s.experts, 0.f);
    for (int p = 0; p < parts; p++) {
      for (int i = 0; i < sequences * h; i++) {
        const int t = row_of(p, i);
        logits[p].insert(logits[p].end(), l.begin() + (size_t)t * s.experts, l.begin() + (size_t)(t + 1) * s.experts);
        dweights[p].insert(dweights[p].end(), dweight.begin() + (size_t)t * s.top_k,
                           dweight.begin() + (size_t)(t + 1) * s.top_k);
      }
      cut.push_back(route(s, logits[p].data(), nullptr, sequences * h));
      const std::vector<float> c = sequence_counts(cut.back(), s.experts, 0, h, sequences);
      for (size_t i = 0; i < c.size(); i++) summed[i] += c[i];
    }
    EXPECT_EQ(summed, counts);
    RouterLossSums sums;
    for (int p = 0; p < parts; p++) {
      std::vector<float> dl(logits[p].size());
      const RouterLossSums got =
          router_backward(s, logits[p].data(), cut[p], dweights[p].data(), summed, 0, h, seq_rows, 0.5f, dl.data());
      sums.aux += got.aux, sums.z += got.z;
      for (int i = 0; i < sequences * h; i++)
        for (int e = 0; e < s.experts; e++)
          EXPECT_EQ(dl[(size_t)i * s.experts + e], dl_whole[(size_t)row_of(p, i) * s.experts + e]) << parts << " shares";
    }
    EXPECT_NEAR(sums.aux, all.aux, 1e-12);
    EXPECT_NEAR(sums.z, all.z, 1e-12);
  }
}

// Rows sent to their experts and back through the backend's row ops: with
// every weight 1/k (exact for k a power of two), combining the dispatched
// copies gives each row back bit for bit, values (gather the inputs,
// combine with the weights) and gradients (gather weighted by slot,
// combine unweighted); experts that get no rows change nothing.
TEST(MoeRouting, PermuteThenUnpermuteIsExact) {
  CpuBackend be{1};
  const int E = 8, rows = 24, d = 10;
  for (int k : {1, 2, 4}) {
    RouterSpec s{E, k};
    std::vector<float> l = randn((size_t)rows * E, 31 + k);
    for (int t = 0; t < rows; t++) l[(size_t)t * E + 3] = l[(size_t)t * E + 5] = -50.f;  // experts 3, 5: no rows
    Routing r = route(s, l.data(), nullptr, rows);
    std::fill(r.weight.begin(), r.weight.end(), 1.f / k);
    const Dispatch plan = dispatch(r, E);
    ASSERT_EQ(plan.count[3], 0);
    ASSERT_EQ(plan.count[5], 0);
    const std::vector<float> x = randn((size_t)rows * d, 40 + k);
    std::vector<float> by_expert((size_t)plan.kept * d), back((size_t)rows * d, 0.f);
    be.gather_rows(by_expert.data(), x.data(), rows, plan.row_of_slot.data(), nullptr, plan.kept, d);
    be.combine_rows(back.data(), by_expert.data(), plan.kept, plan.slot_of_pair.data(), r.weight.data(), rows, k, d);
    EXPECT_EQ(back, x) << "values, k " << k;
    std::vector<float> w_of_slot(plan.kept);
    for (int i = 0; i < plan.kept; i++) w_of_slot[i] = r.weight[plan.pair_of_slot[i]];
    std::fill(back.begin(), back.end(), 0.f);
    be.gather_rows(by_expert.data(), x.data(), rows, plan.row_of_slot.data(), w_of_slot.data(), plan.kept, d);
    be.combine_rows(back.data(), by_expert.data(), plan.kept, plan.slot_of_pair.data(), nullptr, rows, k, d);
    EXPECT_EQ(back, x) << "gradients, k " << k;
  }
}

// Expert parallelism's exchange over 4 ranks of 2 experts each (8 in all;
// rank 2's experts 4 and 5 chosen by no row, so it receives nothing), the
// all-to-all done here by hand: every row a rank receives is one of its
// experts' rows from the rank that sent it, in expert order for the
// products (each source's rows of one expert in their order there), and the
// permutation back restores the arrival order bit for bit (which the return
// exchange, its counts swapped, takes home block by block).
TEST(MoeRouting, ExpertExchangeSendsEachRowToItsExpertAndBack) {
  const int ep = 4, E = 8, El = 2, rows = 12, k = 2, d = 3;
  RouterSpec s{E, k};
  std::vector<Dispatch> plans;
  std::vector<std::vector<float>> sent(ep);  // each rank's rows in slot order: (rank, row, column) as values
  std::vector<float> counts;
  for (int r = 0; r < ep; r++) {
    std::vector<float> l = randn((size_t)rows * E, 60 + r);
    for (int t = 0; t < rows; t++) l[(size_t)t * E + 4] = l[(size_t)t * E + 5] = -50.f;
    plans.push_back(dispatch(route(s, l.data(), nullptr, rows), E));
    for (int slot = 0; slot < plans[r].kept; slot++)
      for (int c = 0; c < d; c++) sent[r].push_back(1000.f * r + 10.f * plans[r].row_of_slot[slot] + c);
    counts.insert(counts.end(), plans[r].count.begin(), plans[r].count.end());
  }
  std::vector<ExpertExchange> x;
  for (int m = 0; m < ep; m++) x.push_back(expert_exchange(counts, ep, m, E));
  EXPECT_EQ(x[2].received, 0);
  for (int m = 0; m < ep; m++) {
    // The all-to-all: from each source, its block for m (in rank order).
    std::vector<float> arrived;
    for (int src = 0; src < ep; src++) {
      size_t at = 0;
      for (int j = 0; j < m; j++) at += x[src].send_rows[j];
      EXPECT_EQ(x[src].send_rows[m], x[m].recv_rows[src]);
      arrived.insert(arrived.end(), sent[src].begin() + at * d, sent[src].begin() + (at + x[src].send_rows[m]) * d);
    }
    ASSERT_EQ(arrived.size(), (size_t)x[m].received * d);
    // In expert order: expert e's rows from each source in turn, as that source ordered them.
    std::vector<float> by_expert((size_t)x[m].received * d);
    for (int q = 0; q < x[m].received; q++)
      for (int c = 0; c < d; c++) by_expert[(size_t)q * d + c] = arrived[(size_t)x[m].to_expert[q] * d + c];
    for (int e = 0; e < El; e++) {
      std::vector<float> want;
      for (int src = 0; src < ep; src++) {
        const Dispatch& p = plans[src];
        const int g = m * El + e;
        want.insert(want.end(), sent[src].begin() + (size_t)p.offset[g] * d,
                    sent[src].begin() + (size_t)(p.offset[g] + p.count[g]) * d);
      }
      const std::vector<float> got(by_expert.begin() + (size_t)x[m].offset[e] * d,
                                   by_expert.begin() + (size_t)(x[m].offset[e] + x[m].count[e]) * d);
      EXPECT_EQ(got, want) << "rank " << m << ", expert " << e;
    }
    // Back in arrival order: what came from each source, as it came.
    std::vector<float> back((size_t)x[m].received * d);
    for (int i = 0; i < x[m].received; i++)
      for (int c = 0; c < d; c++) back[(size_t)i * d + c] = by_expert[(size_t)x[m].to_source[i] * d + c];
    EXPECT_EQ(back, arrived) << "rank " << m;
  }
}

// Auxiliary-loss-free balancing: below the mean load up by the rate, above
// it down, at it unchanged.
TEST(MoeRouting, BiasMovesTowardTheMeanLoad) {
  const double load[5] = {10, 20, 30, 20, 20};  // mean 20
  const std::vector<float> want = {0.25f, 0.f, -0.25f, 0.f, 0.f};
  EXPECT_EQ(bias_nudge(load, 5, 0.25), want);
}

}  // namespace
