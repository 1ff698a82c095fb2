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

// How the ranks divide (the grid), and the way each dimension that splits
// the job runs where it has several (RecipeKey::way_of): its key, its choice.
struct Split {
  GridShape grid;
  std::vector<std::pair<const RecipeKey*, std::string>> ways;
};

// Every split of the model dimensions (kGridDims order, the fastest first;
// tensor parallelism at most 8 ranks, a node's), each with every way of
// each dimension over 1, dp what is left.
void splits(int ranks, int dim, Split s, std::vector<Split>& out) {
  if (dim == kGridDimCount) {
    s.grid.dp = ranks / (int)s.grid.model_ranks();
    return out.push_back(s);
  }
  const GridDim& d = kGridDims[dim];
  if (!(kModelDims & grid_dim(d.name))) return splits(ranks, dim + 1, s, out);
  const int rest = ranks / (int)s.grid.model_ranks();
  for (int n : divisors(rest, grid_dim(d.name) == grid_dim("tp") ? 8 : ranks)) {
    Split t = s;
    t.grid.*d.size = n;
    std::vector<Split> ways = {t};
    if (n > 1)
      for (const RecipeKey* k : ways_of(d.name)) {
        std::vector<Split> each;
        for (const Split& w : ways)
          for (const std::string& c : k->choices) {
            each.push_back(w);
            each.back().ways.push_back({k, c});
          }
        ways = std::move(each);
      }
    for (const Split& w : ways) splits(ranks, dim + 1, w, out);
  }
}

// Every split, schedule, micro-batch, recompute mode and ZeRO stage in the
// base's precision (with `precision` edits first, when given).
std::vector<LayoutCandidate> layouts_of(const Recipe& base, const Edits& precision, int ranks) {
  const int batch = base.training.global_batch;
  std::vector<LayoutCandidate> out;
  std::vector<Split> all;
  splits(ranks, 0, Split{}, all);
  for (const auto& [g, ways] : all)
    for (bool sp : g.tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})
      for (int v : g.pp > 1 ? std::vector<int>{1, 2} : std::vector<int>{1})
        for (int mb : {1, 2, 4, 8, 16}) {
          if (mb * g.dp > batch) continue;
          for (const char* rec : {"none", "selective", "full"})
            for (int zero : g.weight_replicas() > 1 ? std::vector<int>{0, 1} : std::vector<int>{0}) {
              Edits edits = precision;
              // dp, then the model dimensions the fastest first: the order
              // of the candidates' `sets` and labels; the ways last.
              Edits layout = {{"parallel.dp", (long)g.dp}};
              std::string label = "dp " + std::to_string(g.dp);
              for (const GridDim& d : kGridDims) {
                if (!(kModelDims & grid_dim(d.name))) continue;
                layout.push_back({"parallel." + std::string(d.name), (long)(g.*d.size)});
                if (!(named_dims(g) & grid_dim(d.name))) continue;
                label += " " + std::string(d.name) + " " + std::to_string(g.*d.size);
                if (sp && grid_dim(d.name) == grid_dim("tp")) label += " sp";
                for (const auto& [k, way] : ways)
                  if (k->way_of == d.name) label += " " + way;
                if (g.pp > 1 && grid_dim(d.name) == grid_dim("pp")) label += v > 1 ? " interleaved" : " 1f1b";
              }
              const Edits rest = {{"parallel.sequence_parallel", sp},
                                  {"parallel.schedule", std::string(v > 1 ? "interleaved" : "1f1b")},
                                  {"parallel.virtual_stages", (long)v},
                                  {"training.micro_batch", (long)mb},
                                  {"recompute.mode", std::string(rec)},
                                  {"parallel.zero_stage", (long)zero}};
              layout.insert(layout.end(), rest.begin(), rest.end());
              for (const auto& [k, way] : ways) layout.push_back({k->full(), way});
              edits.insert(edits.end(), layout.begin(), layout.end());
              LayoutCandidate c = candidate(base, edits, ranks);
              c.sets.erase(c.sets.begin(), c.sets.begin() + (long)precision.size());  // the layout's own lines
              c.label = label + " mb " + std::to_string(mb) + " " + rec + " zero " + std::to_string(zero);
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
