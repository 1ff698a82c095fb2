#include "model/layer/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace trainer {

namespace {

// One row's scores (s), its softmax (for the z-loss; the scores themselves
// under softmax scoring) and log-sum-exp, in double.
struct RowScores {
  std::vector<double> s, softmax;
  double lse = 0;
};
void score_row(const RouterSpec& spec, const float* l, RowScores& out) {
  const int E = spec.experts;
  out.s.resize(E), out.softmax.resize(E);
  double m = l[0];
  for (int i = 1; i < E; i++) m = std::max(m, (double)l[i]);
  double sum = 0;
  for (int i = 0; i < E; i++) sum += out.softmax[i] = std::exp((double)l[i] - m);
  for (int i = 0; i < E; i++) out.softmax[i] /= sum;
  out.lse = m + std::log(sum);
  for (int i = 0; i < E; i++) out.s[i] = spec.sigmoid ? 1 / (1 + std::exp(-(double)l[i])) : out.softmax[i];
}

int sequence_of(int row0, int t, int seq_rows, int sequences) {
  const int b = (row0 + t) / seq_rows;
  if (b >= sequences) throw std::out_of_range("a routed row past the sequences counted");
  return b;
}

}  // namespace

std::vector<float> bias_nudge(const double* load, int experts, double rate) {
  double mean = 0;
  for (int e = 0; e < experts; e++) mean += load[e] / experts;
  std::vector<float> nudge(experts);
  for (int e = 0; e < experts; e++) nudge[e] = (float)(load[e] < mean ? rate : load[e] > mean ? -rate : 0.0);
  return nudge;
}

int expert_capacity(double factor, int top_k, int rows, int experts) {
  if (factor <= 0) return 0;
  // (1e-9: a product that is a whole number in exact arithmetic stays one)
  return std::max(1, (int)std::ceil(factor * top_k * rows / experts - 1e-9));
}

ExpertExchange expert_exchange(const std::vector<float>& counts, int ep, int me, int experts) {
  const int El = experts / ep;
  const auto n = [&](int src, int e) { return (int)counts[(size_t)src * experts + e]; };  // (exact: whole numbers)
  ExpertExchange x;
  x.send_rows.assign(ep, 0), x.recv_rows.assign(ep, 0);
  x.count.assign(El, 0), x.offset.assign(El, 0);
  for (int j = 0; j < ep; j++)
    for (int e = 0; e < El; e++) x.send_rows[j] += n(me, j * El + e), x.recv_rows[j] += n(j, me * El + e);
  for (int src = 0; src < ep; src++)
    for (int e = 0; e < El; e++) x.count[e] += n(src, me * El + e);
  for (int e = 1; e < El; e++) x.offset[e] = x.offset[e - 1] + x.count[e - 1];
  x.received = x.offset[El - 1] + x.count[El - 1];
  x.to_expert.resize(x.received), x.to_source.resize(x.received);
  std::vector<int> next(x.offset);
  int arrived = 0;  // arrival order: by source, then its expert order
  for (int src = 0; src < ep; src++)
    for (int e = 0; e < El; e++)
      for (int i = 0; i < n(src, me * El + e); i++, arrived++) {
        const int q = next[e]++;
        x.to_expert[q] = arrived, x.to_source[arrived] = q;
      }
  return x;
}

Routing route(const RouterSpec& spec, const float* logits, const float* bias, int rows) {
  const int E = spec.experts, k = spec.top_k;
  if (k < 1 || k > E) throw std::invalid_argument("top_k " + std::to_string(k) + " of " + std::to_string(E) + " experts");
  Routing r;
  r.rows = rows, r.k = k;
  r.expert.resize((size_t)rows * k), r.weight.resize((size_t)rows * k);
  RowScores sc;
  std::vector<char> taken(E);
  for (int t = 0; t < rows; t++) {
    score_row(spec, logits + (size_t)t * E, sc);
    std::fill(taken.begin(), taken.end(), 0);
    double chosen = 0;
    for (int j = 0; j < k; j++) {
      int best = -1;
      double best_q = 0;
      for (int i = 0; i < E; i++) {  // strictly greater: a tie keeps the lower index
        const double q = sc.s[i] + (bias ? bias[i] : 0.0);
        if (!taken[i] && (best < 0 || q > best_q)) best = i, best_q = q;
      }
      taken[best] = 1;
      r.expert[(size_t)t * k + j] = best;
      chosen += sc.s[best];
    }
    for (int j = 0; j < k; j++) {
      const double s = sc.s[r.expert[(size_t)t * k + j]];
      r.weight[(size_t)t * k + j] = (float)(spec.norm_topk ? s / chosen : s);
    }
  }
  return r;
}

Dispatch dispatch(const Routing& r, int experts, int capacity) {
  Dispatch d;
  const size_t pairs = r.expert.size();
  d.slot_of_pair.assign(pairs, -1);
  d.count.assign(experts, 0), d.offset.assign(experts, 0);
  std::vector<char> keep(pairs);
  for (size_t p = 0; p < pairs; p++) {
    const int e = r.expert[p];
    if (capacity > 0 && d.count[e] >= capacity) {
      d.dropped++;
      continue;
    }
    keep[p] = 1, d.count[e]++;
  }
  for (int e = 1; e < experts; e++) d.offset[e] = d.offset[e - 1] + d.count[e - 1];
  d.kept = (int)pairs - d.dropped;
  d.row_of_slot.resize(d.kept), d.pair_of_slot.resize(d.kept);
  std::vector<int> next(d.offset);
  for (size_t p = 0; p < pairs; p++) {
    if (!keep[p]) continue;
    const int slot = next[r.expert[p]]++;
    d.slot_of_pair[p] = slot;
    d.row_of_slot[slot] = (int32_t)(p / r.k);
    d.pair_of_slot[slot] = (int32_t)p;
  }
  return d;
}

std::vector<float> sequence_counts(const Routing& r, int experts, int row0, int seq_rows, int sequences) {
  std::vector<float> c((size_t)sequences * experts, 0.f);
  for (int t = 0; t < r.rows; t++) {
    const int b = sequence_of(row0, t, seq_rows, sequences);
    for (int j = 0; j < r.k; j++) c[(size_t)b * experts + r.expert[(size_t)t * r.k + j]] += 1.f;
  }
  return c;
}

RouterLossSums router_backward(const RouterSpec& spec, const float* logits, const Routing& r, const float* dweight,
                               const std::vector<float>& counts, int row0, int seq_rows, int seq_tokens,
                               float loss_scale, float* dlogits) {
  const int E = spec.experts, k = r.k;
  const int sequences = (int)(counts.size() / E);
  RouterLossSums sums;
  RowScores sc;
  std::vector<double> ds(E), u(E), dl(E);
  for (int t = 0; t < r.rows; t++) {
    score_row(spec, logits + (size_t)t * E, sc);
    const int32_t* ex = &r.expert[(size_t)t * k];
    const float* dw = dweight + (size_t)t * k;
    // Through the weights to the chosen scores.
    std::fill(ds.begin(), ds.end(), 0.0);
    if (spec.norm_topk) {
      double chosen = 0, back = 0;
      for (int j = 0; j < k; j++) chosen += sc.s[ex[j]];
      for (int j = 0; j < k; j++) back += dw[j] * (sc.s[ex[j]] / chosen);
      for (int j = 0; j < k; j++) ds[ex[j]] += (dw[j] - back) / chosen;
    } else {
      for (int j = 0; j < k; j++) ds[ex[j]] += dw[j];
    }
    // Through the scores to the logits.
    if (spec.sigmoid) {
      for (int m = 0; m < E; m++) dl[m] = ds[m] * sc.s[m] * (1 - sc.s[m]);
    } else {
      double dot = 0;
      for (int i = 0; i < E; i++) dot += ds[i] * sc.s[i];
      for (int m = 0; m < E; m++) dl[m] = sc.s[m] * (ds[m] - dot);
    }
    // Balancing: a_t = sum_i u_i p_ti, u_i = aux_coeff f_bi (a constant).
    if (spec.aux_coeff != 0) {
      const int b = sequence_of(row0, t, seq_rows, sequences);
      for (int i = 0; i < E; i++) u[i] = spec.aux_coeff * E / ((double)k * seq_tokens) * counts[(size_t)b * E + i];
      double total = 0, ubar = 0;
      for (int i = 0; i < E; i++) total += sc.s[i];
      const double norm = spec.sigmoid ? total : 1.0;  // p = s / sum s for sigmoid scores
      for (int i = 0; i < E; i++) ubar += u[i] * sc.s[i] / norm;
      sums.aux += ubar;
      for (int m = 0; m < E; m++) {
        const double dsm = spec.sigmoid ? sc.s[m] * (1 - sc.s[m]) : sc.s[m];  // ds_m / dl_m, and softmax's coupling
        dl[m] += loss_scale * dsm * (u[m] - ubar) / norm;
      }
    }
    // z-loss: z_coeff lse^2, d lse / dl = softmax(l).
    if (spec.z_coeff != 0) {
      sums.z += spec.z_coeff * sc.lse * sc.lse;
      for (int m = 0; m < E; m++) dl[m] += loss_scale * 2 * spec.z_coeff * sc.lse * sc.softmax[m];
    }
    for (int m = 0; m < E; m++) dlogits[(size_t)t * E + m] = (float)dl[m];
  }
  return sums;
}

}  // namespace trainer
