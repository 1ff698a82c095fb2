#include "planning/layout_candidates.h"

#include <utility>

#include "recipe/recipe_keys.h"
#include "recipe/recipe_rules.h"

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

using Edits = std::vector<std::pair<std::string, KeyValue>>;  // "section.key", value

// base with the edits made as --set makes them, derived and checked for
// `ranks` as load_recipe(path, overrides + those --set lines, ranks) would.
LayoutCandidate candidate(const Recipe& base, const Edits& edits, int ranks) {
  LayoutCandidate c;
  c.recipe = base;
  c.recipe.warnings.clear();
  for (const auto& [key, value] : edits) {
    c.sets.push_back(key + "=" + toml_text(*find_recipe_key(key), value));
    if (c.rejected.empty()) c.rejected = edit_key(c.recipe, key, value);
  }
  if (c.rejected.empty()) c.rejected = apply_defaults(c.recipe, ranks);
  if (c.rejected.empty())
    for (RecipeProblem& p : check_recipe(c.recipe, ranks)) {
      if (!p.warning) c.rejected = p.message;
      else c.recipe.warnings.push_back(std::move(p.message));
    }
  if (!c.rejected.empty()) c.rejected = reason(c.rejected), c.recipe = Recipe{};
  return c;
}

// How the ranks divide (the grid), and the cp group's attention.
struct Split {
  GridShape grid;
  CpComm cp_comm;  // when cp > 1
};

std::vector<Split> splits(int ranks) {
  std::vector<Split> out;
  for (int tp : divisors(ranks, 8))
    for (int cp : divisors(ranks / tp, ranks))
      for (CpComm cp_comm : cp > 1 ? std::vector<CpComm>{CpComm::Ring, CpComm::A2a} : std::vector<CpComm>{CpComm::Ring})
        for (int pp : divisors(ranks / (tp * cp), ranks)) {
          GridShape g;
          g.tp = tp, g.cp = cp, g.pp = pp, g.dp = ranks / (int)g.model_ranks();
          out.push_back({g, cp_comm});
        }
  return out;
}

// Every split, schedule, micro-batch, recompute mode and ZeRO stage in the
// base's precision (with `precision` edits first, when given).
std::vector<LayoutCandidate> layouts_of(const Recipe& base, const Edits& precision, int ranks) {
  const int batch = base.training.global_batch;
  std::vector<LayoutCandidate> out;
  for (const auto& [g, cp_comm] : splits(ranks))
    for (bool sp : g.tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})
      for (int v : g.pp > 1 ? std::vector<int>{1, 2} : std::vector<int>{1})
        for (int mb : {1, 2, 4, 8, 16}) {
          if (mb * g.dp > batch) continue;
          for (const char* rec : {"none", "selective", "full"})
            for (int zero : g.weight_replicas() > 1 ? std::vector<int>{0, 1} : std::vector<int>{0}) {
              Edits edits = precision;
              // (dp, tp, cp, pp: the order of the candidates' `sets` and labels)
              Edits layout = {{"parallel.dp", (long)g.dp},
                              {"parallel.tp", (long)g.tp},
                              {"parallel.cp", (long)g.cp},
                              {"parallel.pp", (long)g.pp},
                              {"parallel.sequence_parallel", sp},
                              {"parallel.schedule", std::string(v > 1 ? "interleaved" : "1f1b")},
                              {"parallel.virtual_stages", (long)v},
                              {"training.micro_batch", (long)mb},
                              {"recompute.mode", std::string(rec)},
                              {"parallel.zero_stage", (long)zero}};
              if (g.cp > 1) layout.push_back({"parallel.cp_comm", std::string(cp_comm_name(cp_comm))});
              edits.insert(edits.end(), layout.begin(), layout.end());
              LayoutCandidate c = candidate(base, edits, ranks);
              c.sets.erase(c.sets.begin(), c.sets.begin() + (long)precision.size());  // the layout's own lines
              c.label = "dp " + std::to_string(g.dp) + " tp " + std::to_string(g.tp) + (sp ? " sp" : "") +
                        (g.cp > 1 ? " cp " + std::to_string(g.cp) + " " + cp_comm_name(cp_comm) : "") + " pp " +
                        std::to_string(g.pp) + (g.pp > 1 ? (v > 1 ? " interleaved" : " 1f1b") : "") + " mb " +
                        std::to_string(mb) + " " + rec + " zero " + std::to_string(zero);
              out.push_back(std::move(c));
            }
        }
  return out;
}

}  // namespace

std::vector<LayoutCandidate> layout_candidates(const Recipe& base, int ranks, bool all_precisions) {
  if (!all_precisions) return layouts_of(base, {}, ranks);
  std::vector<LayoutCandidate> out;
  for (const std::string p : {"fp32", "bf16"}) {
    const Edits precision = {{"training.precision", p}};
    for (LayoutCandidate& c : layouts_of(base, precision, ranks)) {
      c.sets.push_back("training.precision=" + toml_text(*find_recipe_key("training.precision"), p));
      c.label += " " + p;
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace trainer
