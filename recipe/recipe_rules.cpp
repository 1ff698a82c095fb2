#include "recipe/recipe_rules.h"

#include <algorithm>
#include <climits>

#include "recipe/recipe_keys.h"

namespace trainer {

namespace {

class Rules {
 public:
  explicit Rules(const Recipe& r) : o_(r.origin) {}
  // An error on section.key: "where: [section] key: why".
  bool fail(const std::string& sec, const std::string& key, const std::string& why) {
    out_.push_back({sec, key, o_.problem(sec, key, why), false});
    return false;
  }
  // A warning; text follows "[section] ".
  void warn(const std::string& sec, const std::string& key, const std::string& text) {
    out_.push_back({sec, key, o_.where(sec, key) + ": [" + sec + "] " + text, true});
  }
  std::vector<RecipeProblem> take() { return std::move(out_); }

 private:
  const RecipeOrigin& o_;
  std::vector<RecipeProblem> out_;
};

// Each returns false at its first error (recorded in `rules`).
bool moe(const Recipe& r, Rules& rules);
bool run_and_model(const Recipe& r, Rules& rules) {
  const ModelConfig& m = r.model;
  if (r.run.dir.empty()) return rules.fail("run", "dir", "must not be empty");
  // The name is one path component of the default run.dir (runs/NAME) and
  // is printed in logs: no separators, no way up, no control characters.
  const std::string& name = r.run.name;
  const bool control = std::any_of(name.begin(), name.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || control)
    return rules.fail("run", "name",
                      toml_text(name, KeyType::String) + " is not one plain path component (no \"/\", not \".\" "
                      "or \"..\", no control characters); put directories in run.dir");
  if (m.arch == Arch::GPT2 && r.origin.is_given("model", "n_kv_heads") && m.n_kv_heads != m.n_heads)
    return rules.fail("model", "n_kv_heads", "grouped-query attention needs arch = \"llama\" (gpt2 uses n_heads)");
  for (const auto& [key, msg] : validate(m)) return rules.fail("model", key, msg);
  return moe(r, rules);
}

// [moe]: SwiGLU experts on the CPU (the CUDA kernels are not built yet).
bool moe(const Recipe& r, Rules& rules) {
  const MoeConfig& e = r.model.moe;
  if (!e.enabled()) return true;
  if (r.model.arch != Arch::Llama)
    return rules.fail("moe", "experts", "Mixture-of-Experts MLPs are SwiGLU experts: set model.arch = \"llama\"");
  if (e.top_k > e.experts)
    return rules.fail("moe", "top_k", "top_k = " + std::to_string(e.top_k) + " is more than the " +
                                          std::to_string(e.experts) + " experts");
  if (e.dense_layers >= r.model.n_layers)
    return rules.fail("moe", "dense_layers", "dense_layers = " + std::to_string(e.dense_layers) +
                                                 " leaves none of the " + std::to_string(r.model.n_layers) +
                                                 " layers with experts: use fewer, or moe.experts = 0");
  if (r.runtime.backend == "cuda")
    return rules.fail("moe", "experts", "Mixture-of-Experts runs on the CPU backend only for now: set "
                                        "runtime.backend = \"cpu\" or moe.experts = 0");
  return true;
}

// [parallel]: dp is what the launch leaves when not given.
// "parallel.pp / parallel.cp / parallel.tp": the keys of one model copy's
// dimensions, the slowest first.
std::string lower_model_dims() {
  std::string s;
  each_grid_dim_slowest_first([&](const GridDim& d, GridDims bit) {
    if (kModelDims & bit) s += (s.empty() ? "parallel." : " / parallel.") + std::string(d.name);
  });
  return s;
}

bool layout(const Recipe& r, int world_size, Rules& rules) {
  const RecipeOrigin& o = r.origin;
  const ModelConfig& m = r.model;
  const bool dp_given = o.is_given("parallel", "dp");
  const GridShape& g = r.parallel.grid;
  // Each size is at most kMaxRanks (the keys' range); their product first,
  // in 64 bits, so that every product of sizes below fits an int.
  if (g.ranks() > GridShape::kMaxRanks) {
    std::string key = "dp";
    for (const GridDim& d : kGridDims)
      if (o.is_overridden("parallel", d.name)) {
        key = d.name;
        break;
      }
    return rules.fail("parallel", key,
                      grid_names() + " = " + grid_values(g) + " comes to " +
                          (g.ranks() == LONG_MAX ? std::string("more than 2^63") : std::to_string(g.ranks())) +
                          " ranks, more than the " + std::to_string(GridShape::kMaxRanks) + " a job may have");
  }
  const long model_ranks = r.parallel.model_ranks();
  // The key a layout problem is blamed on: the one the user set (a --set
  // override before a line of the file), the model dimensions the fastest
  // first; the slowest where none is.
  auto layout_key = [&]() -> std::string {
    std::string last;
    for (const GridDim& d : kGridDims)
      if (kModelDims & grid_dim(d.name) && o.is_overridden("parallel", d.name)) return d.name;
    for (const GridDim& d : kGridDims)
      if (kModelDims & grid_dim(d.name)) {
        if (o.is_given("parallel", d.name)) return d.name;
        last = d.name;
      }
    return last;
  };
  if (!dp_given && world_size > 0 && world_size % model_ranks != 0)
    return rules.fail("parallel", layout_key(),
                      grid_names(kModelDims) + " = " + std::to_string(model_ranks) +
                          " ranks hold one model copy, so the job needs a multiple of " + std::to_string(model_ranks) +
                          " ranks (dp = ranks / (" + grid_names(kModelDims) + ")); it was launched with " +
                          std::to_string(world_size) +
                          ": use mpirun -np " + std::to_string(model_ranks) + " (or " +
                          std::to_string(2 * model_ranks) + ", ...), or lower " + lower_model_dims());
  if (world_size > 0 && g.ranks() != world_size)
    return rules.fail("parallel", dp_given ? "dp" : layout_key(),
                      grid_names() + " = " + grid_values(g) + " = " + std::to_string(g.ranks()) +
                          " does not match the " + std::to_string(world_size) + " ranks this job was launched with");
  for (const auto& [key, msg] : validate_tp(m, g.tp)) {  // ("n_heads": [model]'s; "moe.x": [moe]'s)
    const size_t dot = key.find('.');
    return dot == std::string::npos ? rules.fail("model", key, msg) : rules.fail(key.substr(0, dot), key.substr(dot + 1), msg);
  }
  // Context parallelism cuts each sequence into 2 x cp equal chunks
  // (parallel/context_chunks.h).
  if (g.cp > 1 && m.seq_len % (2 * g.cp) != 0)
    return rules.fail("parallel", "cp",
                      "cp = " + std::to_string(g.cp) + " cuts each sequence into 2 * cp = " + std::to_string(2 * g.cp) +
                          " equal chunks, so model.seq_len = " + std::to_string(m.seq_len) + " must divide by " +
                          std::to_string(2 * g.cp));
  // The all-to-all gives each of the cp x tp ranks whole heads, q and kv.
  if (g.cp > 1 && r.parallel.cp_comm == CpComm::A2a) {
    const int n = g.cp * g.tp;
    if (m.n_heads % n != 0 || m.kv_heads() % n != 0)
      return rules.fail("parallel", "cp_comm",
                        "cp_comm = \"a2a\" gives each of the cp * tp = " + std::to_string(g.cp) + " * " +
                            std::to_string(g.tp) + " = " + std::to_string(n) +
                            " ranks whole heads, so model.n_heads = " + std::to_string(m.n_heads) +
                            " and the kv heads (n_kv_heads) = " + std::to_string(m.kv_heads()) + " must both divide by " +
                            std::to_string(n) + "; use cp_comm = \"ring\" (any head count) or a cp that divides them");
  }
  if (r.parallel.sequence_parallel && (m.seq_len / g.cp) % g.tp != 0)
    return rules.fail("parallel", "sequence_parallel",
                      g.cp > 1 ? "needs each context-parallel rank's tokens, model.seq_len / cp = " +
                                     std::to_string(m.seq_len / g.cp) + ", divisible by tp = " + std::to_string(g.tp)
                               : "needs model.seq_len = " + std::to_string(m.seq_len) + " divisible by tp = " +
                                     std::to_string(g.tp));
  if (r.parallel.schedule == ScheduleKind::OneFOneB && r.parallel.virtual_stages != 1)
    return rules.fail("parallel", "virtual_stages",
                      "the \"1f1b\" schedule has one chunk per stage; use schedule = \"interleaved\" for "
                      "virtual_stages > 1");
  if (r.parallel.schedule == ScheduleKind::Interleaved && (r.parallel.virtual_stages < 2 || r.parallel.grid.pp < 2))
    return rules.fail("parallel", "virtual_stages", "the interleaved schedule needs pp >= 2 and virtual_stages >= 2");
  if (m.n_layers % ((long)r.parallel.grid.pp * r.parallel.virtual_stages) != 0)
    return rules.fail("parallel", o.is_overridden("parallel", "virtual_stages") ? "virtual_stages" : "pp",
                      "n_layers = " + std::to_string(m.n_layers) + " must be divisible by pp * virtual_stages = " +
                          std::to_string(r.parallel.grid.pp) + " * " + std::to_string(r.parallel.virtual_stages));
  // Each tp rank routes its own rows: without sequence parallelism every tp
  // rank would compute every token's experts.
  if (m.moe.enabled() && g.tp > 1 && !r.parallel.sequence_parallel)
    return rules.fail("parallel", "sequence_parallel", "Mixture-of-Experts with tp = " + std::to_string(g.tp) +
                                                           " needs sequence_parallel = true (as Megatron-Core's)");
  // Expert parallelism folds into the weight replicas (GridShape::ep).
  if (g.ep > 1) {
    const std::string ep = "ep = " + std::to_string(g.ep);
    if (!m.moe.enabled())
      return rules.fail("parallel", "ep", ep + " splits Mixture-of-Experts layers' experts: set [moe] experts, or ep = 1");
    if (g.weight_replicas() % g.ep != 0)
      return rules.fail("parallel", "ep", ep + " is taken from the weight replicas, dp * cp = " +
                                              std::to_string(g.weight_replicas()) + ", which must divide by it");
    if (m.moe.experts % g.ep != 0)
      return rules.fail("parallel", "ep", ep + " must divide moe.experts = " + std::to_string(m.moe.experts));

  }
  if (m.moe.enabled() && r.parallel.zero_sharded() && r.parallel.zero_stage >= 2)
    return rules.fail("parallel", "zero_stage", "ZeRO-" + std::to_string(r.parallel.zero_stage) +
                                                    " with Mixture-of-Experts is not built yet: use zero_stage <= 1");
  return true;
}

// [launch]: where `supervise` runs the job (supervise/allocation.h).
bool launch(const Recipe& r, Rules& rules) {
  const LaunchSection& l = r.launch;
  if (!l.hosts.empty() && !l.hostfile.empty())
    return rules.fail("launch", "hostfile", "give the hosts once: launch.hosts or launch.hostfile, not both");
  const int ranks = l.ranks > 0 ? l.ranks : r.parallel.grid.ranks();
  if (l.nodes > 0 && ranks % l.nodes != 0)
    return rules.fail("launch", "nodes",
                      std::to_string(l.nodes) + " does not divide the job's " + std::to_string(ranks) +
                          " ranks: every node runs the same number of ranks");
  if (!l.hosts.empty() && l.nodes > (int)l.hosts.size())
    return rules.fail("launch", "nodes",
                      std::to_string(l.nodes) + " is more than the " + std::to_string(l.hosts.size()) +
                          " host(s) launch.hosts lists");
  return true;
}

// [training], [optimizer] and the rest.
bool training(const Recipe& r, Rules& rules) {
  const ModelConfig& m = r.model;
  const TrainingSection& t = r.training;
  const long per_step = (long)t.micro_batch * r.parallel.grid.dp;  // both may be near 2^31
  if (t.global_batch % per_step != 0)
    return rules.fail("training", "global_batch",
                      std::to_string(t.global_batch) + " is not divisible by micro_batch * dp = " +
                          std::to_string(t.micro_batch) + " * " + std::to_string(r.parallel.grid.dp) + " = " +
                          std::to_string(per_step) +
                          " (gradient accumulation needs a whole number of micro-batches per rank)");
  if ((long)t.micro_batch * m.seq_len > Recipe::kMaxMicroBatchTokens)
    return rules.fail("training", "micro_batch",
                      std::to_string(t.micro_batch) + " x model.seq_len " + std::to_string(m.seq_len) + " = " +
                          std::to_string((long)t.micro_batch * m.seq_len) + " tokens in one micro-batch: more than " +
                          std::to_string(Recipe::kMaxMicroBatchTokens) + ", the most one tensor is indexed by");
  if (r.accum_steps() > Recipe::kMaxAccumSteps)
    return rules.fail("training", "global_batch",
                      "global_batch / (micro_batch * dp) = " + std::to_string(r.accum_steps()) +
                          " micro-batches per step: more than " + std::to_string(Recipe::kMaxAccumSteps) +
                          " (raise training.micro_batch or parallel.dp)");
  // The schedule runs each micro-batch through each of a stage's chunks
  // (parallel/pipeline_schedule.h), its messages tagged by both: at most
  // kMaxAccumSteps chunk passes, so their count and tags fit an int.
  if ((long)r.accum_steps() * r.parallel.virtual_stages > Recipe::kMaxAccumSteps)
    return rules.fail("parallel", "virtual_stages",
                      std::to_string(r.accum_steps()) + " micro-batches per step x virtual_stages " +
                          std::to_string(r.parallel.virtual_stages) + " = " +
                          std::to_string((long)r.accum_steps() * r.parallel.virtual_stages) +
                          " chunk passes per stage and step: more than " + std::to_string(Recipe::kMaxAccumSteps) +
                          " (fewer virtual stages, or fewer micro-batches per step)");
  if (r.parallel.schedule == ScheduleKind::Interleaved && r.accum_steps() % r.parallel.grid.pp != 0)
    return rules.fail(
        "training", "global_batch",
        "the interleaved schedule needs the micro-batches per step, global_batch / (micro_batch * dp) = " +
            std::to_string(r.accum_steps()) + ", to be a multiple of pp = " + std::to_string(r.parallel.grid.pp));
  if (r.lr.min_lr > r.lr.lr)
    return rules.fail("optimizer", "min_lr", "must be in [0, lr]: at most lr = " + toml_text((double)r.lr.lr, KeyType::Float));
  if (r.lr.warmup_steps > t.steps)  // legal (the run never reaches the peak rate), rarely meant
    rules.warn("optimizer", "warmup_steps",
               "warmup_steps = " + std::to_string(r.lr.warmup_steps) + " is more than training.steps = " +
                   std::to_string(t.steps) + ": the learning rate never reaches its peak " +
                   toml_text((double)r.lr.lr, KeyType::Float));
  if (r.recompute.layers == 0)
    return rules.fail("recompute", "layers", "must be a positive number of layers per chunk (or -1: all)");
  if (r.checkpoint.dir.empty()) return rules.fail("checkpoint", "dir", "must not be empty");
  if (r.supervisor.backoff_max < r.supervisor.backoff)
    return rules.fail("supervisor", "backoff_max", "must be >= supervisor.backoff");
  if (r.supervisor.on_straggler == "replace" && r.runtime.straggler_factor <= 0)
    return rules.fail("supervisor", "on_straggler",
                      "\"replace\" acts on the straggler reports, which runtime.straggler_factor = 0 turns off");
  if (r.supervisor.on_straggler == "replace" && r.launch.hosts.empty() && r.launch.hostfile.empty() &&
      r.launch.nodes == 0)
    rules.warn("supervisor", "on_straggler",
               "on_straggler = \"replace\" swaps a host for a spare of the allocation, and there is none without "
               "launch.hosts, launch.hostfile or (under Slurm) launch.nodes: stragglers are only reported");
  if (r.supervisor.elastic && r.supervisor.spare_wait > 0)
    rules.warn("supervisor", "spare_wait",
               "spare_wait is not used with elastic = true: with no spare left the job shrinks at once");
  if (!r.supervisor.elastic && r.supervisor.spare_wait > 0 && !r.supervisor.readmit)
    rules.warn("supervisor", "spare_wait",
               "with readmit = false no excluded host returns, so the wait can only end in exit 7");
  if (!launch(r, rules)) return false;
  if (t.exit_after > 0 && r.checkpoint.every == 0)
    rules.warn("training", "exit_after",
               "exit_after = " + std::to_string(t.exit_after) +
                   " stops this launch early, but checkpoint.every = 0 saves nothing to resume from");
  if (t.eval_every > 0 && r.data.val.empty())
    return rules.fail("training", "eval_every",
                      "evaluation every " + std::to_string(t.eval_every) +
                          " steps needs validation data: set [data] val, or eval_every = 0");
  return true;
}

}  // namespace

std::vector<RecipeProblem> check_recipe(const Recipe& r, int world_size) {
  Rules rules(r);
  if (run_and_model(r, rules) && layout(r, world_size, rules)) training(r, rules);
  return rules.take();
}

}  // namespace trainer
