#include "planning/real_steps.h"

#include <algorithm>
#include <cmath>

#include "planning/step_model.h"

namespace trainer {

namespace {

// Beyond this the measurement, not the model, is what is wrong.
constexpr double kMaxActionMs = 20;

// A step as the model prices it without the anchor's factor.
double unanchored(MachineProfile p, int per_node, const Recipe& r) {
  p.anchor_measured_ms = p.anchor_predicted_ms = 0;
  return StepModel(p, per_node).predict(r).step_ms;
}

// The many-action layout's step as the model prices it with action cost x
// (the anchor's prediction, and so its factor, taken with x too).
double priced(MachineProfile p, int per_node, const Recipe& anchor, const Recipe& many, double x) {
  p.action_ms = x;
  return unanchored(p, per_node, many) * p.anchor_measured_ms / unanchored(p, per_node, anchor);
}

}  // namespace

void set_anchor(MachineProfile& p, int ranks_per_node, const Recipe& r, const std::string& layout, double measured_ms) {
  p.anchor_layout = layout, p.anchor_measured_ms = measured_ms;
  p.anchor_predicted_ms = unanchored(p, ranks_per_node, r);
}

void solve_action_cost(MachineProfile& p, int ranks_per_node, const Recipe& anchor, const Recipe& many_actions,
                       double measured_ms) {
  // The priced step grows with x, close to linearly: none when the model
  // without it is already slower than measured, else secant steps from 0 and 1 ms.
  double x0 = 0, t0 = priced(p, ranks_per_node, anchor, many_actions, x0);
  double x1 = 1, t1 = priced(p, ranks_per_node, anchor, many_actions, x1);
  if (t0 >= measured_ms) x1 = 0, t1 = t0;
  for (int i = 0; i < 4 && t1 != t0 && std::fabs(t1 - measured_ms) > 1e-3 * measured_ms; i++) {
    const double x = std::clamp(x1 + (measured_ms - t1) * (x1 - x0) / (t1 - t0), 0.0, kMaxActionMs);
    x0 = x1, t0 = t1, x1 = x, t1 = priced(p, ranks_per_node, anchor, many_actions, x1);
  }
  p.action_ms = x1;
  p.anchor_predicted_ms = unanchored(p, ranks_per_node, anchor);
}

}  // namespace trainer
