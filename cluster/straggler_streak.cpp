#include "cluster/straggler_streak.h"

namespace trainer {

std::vector<StragglerRun> StragglerStreaks::add(const StragglerWindow& w) {
  // This window's worst figures per host (a host with several slow ranks is
  // one host to swap).
  std::map<std::string, std::pair<double, double>> named;  // host -> (ratio, ms)
  for (size_t i = 0; i < w.hosts.size(); i++) {
    auto [it, fresh] = named.try_emplace(w.hosts[i], w.ratios.at(i), w.compute_ms.at(i));
    if (!fresh && w.ratios[i] > it->second.first) it->second = {w.ratios[i], w.compute_ms[i]};
  }
  std::vector<StragglerRun> out;
  for (const auto& [host, fig] : named) {
    StragglerRun& run = runs_[host];
    if (run.steps.empty() || run.steps.back() != w.step - w.window_steps) {
      // A standing run that missed one report (a window just under the
      // bar) is the same imbalance going on, not a host starting to degrade.
      const bool still = run.standing && !run.steps.empty() && w.step - run.steps.back() <= 2 * w.window_steps;
      run = StragglerRun{host, {}, {}, {}, w.first || still};
    }
    run.steps.push_back(w.step), run.ratios.push_back(fig.first), run.compute_ms.push_back(fig.second);
    if ((int)run.steps.size() < windows_ || run.standing) continue;
    StragglerRun last = run;
    const size_t drop = run.steps.size() - windows_;
    last.steps.erase(last.steps.begin(), last.steps.begin() + drop);
    last.ratios.erase(last.ratios.begin(), last.ratios.begin() + drop);
    last.compute_ms.erase(last.compute_ms.begin(), last.compute_ms.begin() + drop);
    out.push_back(std::move(last));
  }
  return out;
}

}  // namespace trainer
