#include "supervise/straggler_streak.h"

#include <algorithm>

namespace trainer {

std::vector<StragglerRun> StragglerStreaks::add(const StragglerWindow& w) {
  // This window's worst figures per host (a host with several slow ranks is
  // one host to swap), and the ranks it names there: -1 when the report
  // gives none, so that such a run never follows a swap.
  std::map<std::string, std::pair<double, double>> named;  // host -> (ratio, ms)
  std::map<std::string, std::set<int>> on_host;
  const bool ranked = w.ranks.size() == w.hosts.size();
  for (size_t i = 0; i < w.hosts.size(); i++) {
    auto [it, fresh] = named.try_emplace(w.hosts[i], w.ratios.at(i), w.compute_ms.at(i));
    if (!fresh && w.ratios[i] > it->second.first) it->second = {w.ratios[i], w.compute_ms[i]};
    on_host[w.hosts[i]].insert(ranked ? w.ranks[i] : -1);
  }
  std::vector<StragglerRun> out;
  for (const auto& [host, fig] : named) {
    StragglerRun& run = runs_[host];
    if (run.steps.empty() || run.steps.back() != w.step - w.window_steps) {
      // A standing run that missed one report (a window just under the
      // bar) is the same imbalance going on, not a host starting to degrade.
      const bool still = run.standing && !run.steps.empty() && w.step - run.steps.back() <= 2 * w.window_steps;
      run = StragglerRun{};
      run.host = host, run.standing = w.first || still;
    }
    run.steps.push_back(w.step), run.ratios.push_back(fig.first), run.compute_ms.push_back(fig.second);
    run.ranks.insert(on_host[host].begin(), on_host[host].end());
    if ((int)run.steps.size() < windows_) continue;
    // A standing run on ranks a swap moved is returned too: it is what says
    // that the swap did not cure them.
    run.follows = followed(run);
    if (run.standing && !run.follows) continue;
    StragglerRun last = run;
    const size_t drop = run.steps.size() - windows_;
    last.steps.erase(last.steps.begin(), last.steps.begin() + drop);
    last.ratios.erase(last.ratios.begin(), last.ratios.begin() + drop);
    last.compute_ms.erase(last.compute_ms.begin(), last.compute_ms.begin() + drop);
    out.push_back(std::move(last));
  }
  return out;
}

// Only when every rank the run names was moved by the swap: a host that also
// slows a rank the swap did not move may be slow itself (a host to swap), and
// the same rank slow again on its old host (readmitted) is that host's.
std::optional<StragglerSwap> StragglerStreaks::followed(const StragglerRun& run) const {
  if (run.ranks.empty() || run.ranks.count(-1)) return std::nullopt;
  for (auto s = swaps_.rbegin(); s != swaps_.rend(); ++s)
    if (s->host != run.host && std::includes(s->ranks.begin(), s->ranks.end(), run.ranks.begin(), run.ranks.end()))
      return *s;
  return std::nullopt;
}

StragglerSwap StragglerStreaks::swap_of(const StragglerRun& run, int launch) {
  StragglerSwap s{run.host, launch, run.steps.empty() ? 0 : run.steps.back(), run.ranks};
  s.ranks.erase(-1);
  return s;
}

}  // namespace trainer
