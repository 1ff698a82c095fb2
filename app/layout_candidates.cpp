#include "app/layout_candidates.h"

#include "runtime/errors.h"

namespace trainer {

namespace {

std::vector<int> divisors(int n, int most) {
  std::vector<int> d;
  for (int k = 1; k <= std::min(n, most); k++)
    if (n % k == 0) d.push_back(k);
  return d;
}

// The first line of a recipe error, without the file name it starts with.
std::string reason(const std::string& what) {
  std::string s = what.substr(0, what.find('\n'));
  if (const size_t colon = s.find(": "); colon != std::string::npos && s.rfind(".toml", colon) != std::string::npos)
    s = s.substr(colon + 2);
  return s;
}

// Every split, schedule, micro-batch, recompute mode and ZeRO stage in the
// recipe's precision.
std::vector<LayoutCandidate> layouts_of(const std::string& path, const std::vector<std::string>& overrides, int ranks) {
  const Recipe base = load_recipe(path, overrides, 0, false);
  const int batch = base.training.global_batch;
  std::vector<LayoutCandidate> out;
  for (int tp : divisors(ranks, 8))
    for (int pp : divisors(ranks / tp, ranks)) {
      const int dp = ranks / (tp * pp);
      for (bool sp : tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})
        for (int v : pp > 1 ? std::vector<int>{1, 2} : std::vector<int>{1})
          for (int mb : {1, 2, 4, 8, 16}) {
            if (mb * dp > batch) continue;
            for (const char* rec : {"none", "selective", "full"})
              for (int zero : dp > 1 ? std::vector<int>{0, 1} : std::vector<int>{0}) {
                LayoutCandidate c;
                c.sets = {"parallel.dp=" + std::to_string(dp), "parallel.tp=" + std::to_string(tp),
                          "parallel.pp=" + std::to_string(pp),
                          std::string("parallel.sequence_parallel=") + (sp ? "true" : "false"),
                          std::string("parallel.schedule=\"") + (v > 1 ? "interleaved" : "1f1b") + "\"",
                          "parallel.virtual_stages=" + std::to_string(v), "training.micro_batch=" + std::to_string(mb),
                          std::string("recompute.mode=\"") + rec + "\"", "parallel.zero_stage=" + std::to_string(zero)};
                c.label = "dp " + std::to_string(dp) + " tp " + std::to_string(tp) + (sp ? " sp" : "") + " pp " +
                          std::to_string(pp) + (pp > 1 ? (v > 1 ? " interleaved" : " 1f1b") : "") + " mb " +
                          std::to_string(mb) + " " + rec + " zero " + std::to_string(zero);
                std::vector<std::string> all = overrides;
                all.insert(all.end(), c.sets.begin(), c.sets.end());
                try {
                  c.recipe = load_recipe(path, all, ranks, false);
                } catch (const UserError& e) {
                  c.rejected = reason(e.what());
                }
                out.push_back(std::move(c));
              }
          }
    }
  return out;
}

}  // namespace

std::vector<LayoutCandidate> layout_candidates(const std::string& path, const std::vector<std::string>& overrides,
                                               int ranks, bool all_precisions) {
  if (!all_precisions) return layouts_of(path, overrides, ranks);
  std::vector<LayoutCandidate> out;
  for (const std::string p : {"fp32", "bf16"}) {
    std::vector<std::string> with = overrides;
    with.push_back("training.precision=\"" + p + "\"");
    for (LayoutCandidate& c : layouts_of(path, with, ranks)) {
      c.sets.push_back(with.back()), c.label += " " + p;
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace trainer
