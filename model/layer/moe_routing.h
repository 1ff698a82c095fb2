#pragma once
// Token routing for the Mixture-of-Experts MLP (issue 69): which experts each
// row of tokens goes to and with what weight, the plan that puts the rows in
// expert order, the router's balancing losses and the gradient of its
// logits. Host code on the router's fp32 logits, with double sums: the same
// on every backend and layout (the rows themselves move through backend
// ops: gather_rows, combine_rows, row_dots).
//
// Row t with logits l (E experts): scores s = softmax(l), or sigmoid(l)
// elementwise; its top_k experts by s + bias (the bias, auxiliary-loss-free
// balancing, chooses but never weighs; ties go to the lower index), best
// first; their weights w_j = s_{e_j}, divided by their sum with norm_topk.
//
// Balancing loss, per sequence b of T rows (DeepSeek-V3's sequence-wise
// form of the Switch / GShard loss, so that no split of a batch over tp,
// cp, dp or micro-batches changes it): f_bi = E / (k T) x the selections of
// expert i by b's rows, P_bi = the mean over b's rows of p_ti (p = s; for
// sigmoid scores s / sum s), aux = aux_coeff x the mean over sequences of
// sum_i f_bi P_bi (aux_coeff when balanced). z-loss = z_coeff x the mean
// over rows of logsumexp(l_t)^2. Both are means of per-row terms, a_t =
// aux_coeff sum_i f_{b(t)i} p_ti and z_t = z_coeff logsumexp(l_t)^2, so
// they take the cross entropy's per-token scale 1/N; f is a constant of the
// gradient (counts).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainer {

// The most pairs an expert takes of a rank's `rows` rows: ceil(factor x
// top_k x rows / experts); 0 (factor 0): no limit.
int expert_capacity(double factor, int top_k, int rows, int experts);

struct RouterSpec {
  int experts = 0, top_k = 1;
  bool sigmoid = false;    // score = "sigmoid" (else softmax)
  bool norm_topk = false;  // the chosen weights divided by their sum
  double aux_coeff = 0, z_coeff = 0;
  double capacity_factor = 0;  // (0: dropless)
  int capacity(int rows) const { return expert_capacity(capacity_factor, top_k, rows, experts); }
};

// Each row's chosen experts and their weights, [rows * top_k] (pair p = t *
// top_k + j), best first.
struct Routing {
  int rows = 0, k = 0;
  std::vector<int32_t> expert;
  std::vector<float> weight;
};
// bias: [experts] or null.
Routing route(const RouterSpec& s, const float* logits, const float* bias, int rows);

// The rows in expert order: each expert's pairs in pair order, the experts
// one after another. capacity > 0: an expert takes at most that many pairs
// (the first in pair order); the others are dropped (slot -1: they add
// nothing, their token keeps its residual).
struct Dispatch {
  std::vector<int32_t> slot_of_pair;  // [rows * k]: the pair's slot, or -1
  std::vector<int32_t> row_of_slot;   // [kept]: the row whose input the slot computes
  std::vector<int32_t> pair_of_slot;  // [kept]: the pair it is
  std::vector<int> count, offset;     // per expert: its slots, and its first
  int kept = 0, dropped = 0;
};
Dispatch dispatch(const Routing& r, int experts, int capacity = 0);

// Selections per sequence and expert, [sequences * experts], of `rows` rows
// that are rows [row0, row0 + rows) of sequences of seq_rows rows each
// (the caller sums them over the ranks sharing the sequences).
std::vector<float> sequence_counts(const Routing& r, int experts, int row0, int seq_rows, int sequences);

// The router's loss terms over some rows, summed (a_t and z_t above; the
// mean divides by the batch's tokens).
struct RouterLossSums {
  double aux = 0, z = 0;
};
// One layer's router over a training step (its backward passes): its
// losses' sums and each expert's selections (pairs routed to it), for the
// step's metrics.
struct RouterStepSums {
  RouterLossSums losses;
  std::vector<double> selections;  // [experts]
  double dropped = 0;              // pairs past an expert's capacity
  double expert_rows = 0;          // rows this rank's experts computed (under ep: what they received)
};
// dlogits [rows * E] (overwritten): the gradient of the loss with respect to
// the logits, from dweight [rows * k] (its gradient with respect to each
// pair's weight, dropped pairs 0) and the balancing and z terms, each row's
// scaled by loss_scale (the cross entropy's per-token 1/N). counts:
// sequence_counts summed over the whole sequences; the rows as there;
// seq_tokens: a whole sequence's tokens (under context parallelism seq_rows
// is its share).
RouterLossSums router_backward(const RouterSpec& s, const float* logits, const Routing& r, const float* dweight,
                               const std::vector<float>& counts, int row0, int seq_rows, int seq_tokens,
                               float loss_scale, float* dlogits);

// Expert parallelism: the experts split over ep ranks, rank j holding
// [j * E / ep, (j + 1) * E / ep). Each rank sends its kept pairs' rows in
// its plan's order (Dispatch: expert order, so blocks by destination) and
// receives, from each rank in turn, that rank's rows for its own experts in
// expert order. The received rows are put in expert order (every source's
// rows of the first local expert, then the next's) for the experts'
// products, and back in arrival order for the return. counts: every rank's
// kept pairs per expert, [ep][E].
struct ExpertExchange {
  std::vector<size_t> send_rows, recv_rows;  // per ep rank
  std::vector<int> count, offset;            // per local expert: its rows, its first in expert order
  std::vector<int32_t> to_expert;            // [received]: the arrival place of each row in expert order
  std::vector<int32_t> to_source;            // [received]: the expert-order place of each arrived row
  int received = 0;
};
ExpertExchange expert_exchange(const std::vector<float>& counts, int ep, int me, int experts);

// Auxiliary-loss-free balancing's step (DeepSeek-V3): each expert's
// selection bias moves by `rate` toward the mean load of the experts: up
// for an expert below it, down above it, not at all at it. load: [experts].
std::vector<float> bias_nudge(const double* load, int experts, double rate);

// One layer's routing of one micro-batch, as the host keeps it from the
// forward for the backward (full recomputation reuses it: a decision is
// never taken twice): the router's logits, the choice, the plan.
struct MoeRoute {
  std::vector<float> logits;  // [rows * experts]
  Routing routing;
  Dispatch plan;
  ExpertExchange exchange;  // under expert parallelism
  // The host's room for the selection bias, the pairs' weights in slot
  // order and the backward's gradients of the weights and logits (kept to
  // be reused).
  std::vector<float> bias, w_slot, dweight, dlogits;
};

}  // namespace trainer
