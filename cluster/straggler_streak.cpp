#include "cluster/straggler_streak.h"

#include <algorithm>

namespace trainer {

std::optional<StragglerRun> StragglerStreaks::add(const StragglerWindow& w) {
  // This window's worst figures per host (a host with several slow ranks is
  // one host to swap).
  std::map<std::string, std::pair<double, double>> named;  // host -> (ratio, ms)
  for (size_t i = 0; i < w.hosts.size(); i++) {
    auto [it, fresh] = named.try_emplace(w.hosts[i], w.ratios.at(i), w.compute_ms.at(i));
    if (!fresh && w.ratios[i] > it->second.first) it->second = {w.ratios[i], w.compute_ms[i]};
  }
  std::optional<StragglerRun> first;
  for (const auto& [host, fig] : named) {
    StragglerRun& run = runs_[host];
    if (run.steps.empty() || run.steps.back() != w.step - w.window_steps) run = StragglerRun{host, {}, {}, {}};
    run.steps.push_back(w.step), run.ratios.push_back(fig.first), run.compute_ms.push_back(fig.second);
    if ((int)run.steps.size() >= windows_ && !first) {
      first = run;
      const size_t drop = run.steps.size() - windows_;
      first->steps.erase(first->steps.begin(), first->steps.begin() + drop);
      first->ratios.erase(first->ratios.begin(), first->ratios.begin() + drop);
      first->compute_ms.erase(first->compute_ms.begin(), first->compute_ms.begin() + drop);
    }
  }
  return first;
}

}  // namespace trainer
