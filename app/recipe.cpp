// TOML -> Recipe. Every key is declared by the get() call that reads it, so
// unknown keys (typos) are found by comparing what the file has with what was
// read, and the nearest known name is suggested.
#include "app/recipe.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "data/dataset.h"
#include "model/param_registry.h"
#include "runtime/errors.h"

namespace trainer {

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) prev[j] = (int)j;
  for (size_t i = 1; i <= a.size(); i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= b.size(); j++)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace {

std::string nearest(const std::string& word, const std::vector<std::string>& options) {
  std::string best;
  int best_d = 1 << 30;
  for (const auto& o : options) {
    const int d = edit_distance(word, o);
    if (d < best_d) best_d = d, best = o;
  }
  const int limit = std::max(2, (int)word.size() / 3);
  return best_d <= limit ? best : "";
}

// Every section and key a recipe may hold. Checked before any value is read,
// so a typo is reported as a typo rather than as the default it left behind.
const std::vector<std::pair<std::string, std::vector<std::string>>> kSchema = {
    {"run", {"name", "dir", "seed"}},
    {"model", {"arch", "vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff",
               "seq_len", "tie_embeddings", "norm_eps", "rope_theta"}},
    {"data", {"train", "val", "prefetch"}},
    {"training", {"steps", "global_batch", "micro_batch", "grad_clip", "eval_every",
                  "eval_batches", "log_every", "exit_after", "on_nan", "spike_factor",
                  "spike_window", "on_spike"}},
    {"optimizer", {"lr", "min_lr", "warmup_steps", "schedule", "weight_decay", "beta1",
                   "beta2", "eps"}},
    {"parallel", {"dp", "tp", "pp", "sequence_parallel", "schedule", "virtual_stages"}},
    {"runtime", {"threads", "backend", "peak_gflops", "comm_timeout", "straggler_factor", "straggler_every"}},
    {"recompute", {"mode", "layers"}},
    {"checkpoint", {"every", "dir", "keep", "resume", "required", "async", "allow_changes"}},
    {"supervisor", {"max_restarts", "hang_timeout", "backoff", "backoff_max"}},
    {"launch", {"launcher", "ranks", "args"}},
    {"fault", {"inject"}},
};

class RecipeReader {
 public:
  RecipeReader(toml::table& root, std::string file, std::set<std::string> overridden)
      : root_(root), file_(std::move(file)), overridden_(std::move(overridden)) {}

  // Location of section.key for messages: "file:line" or "--set section.key".
  std::string where(const std::string& sec, const std::string& key) const {
    const std::string full = sec + "." + key;
    if (overridden_.count(full)) return "--set " + full;
    if (const toml::node* n = root_.at_path(full).node()) {
      const auto& src = n->source();
      if (src.begin.line > 0) return file_ + ":" + std::to_string(src.begin.line);
    }
    if (const toml::node* s = root_.get(sec)) {
      if (s->source().begin.line > 0) return file_ + ":" + std::to_string(s->source().begin.line);
    }
    return file_;
  }

  [[noreturn]] void fail(const std::string& sec, const std::string& key, const std::string& msg) const {
    throw RecipeError(where(sec, key) + ": [" + sec + "] " + key + ": " + msg);
  }

  const toml::node* node(const std::string& sec, const std::string& key) {
    const toml::node* s = root_.get(sec);
    return s ? s->as_table()->get(key) : nullptr;
  }

  long get_int(const std::string& sec, const std::string& key, long def) {
    const toml::node* n = node(sec, key);
    if (!n) return def;
    if (!n->is_integer()) fail(sec, key, "expected an integer, got " + type_name(*n));
    return (long)n->as_integer()->get();
  }
  double get_float(const std::string& sec, const std::string& key, double def) {
    const toml::node* n = node(sec, key);
    if (!n) return def;
    if (n->is_integer()) return (double)n->as_integer()->get();
    if (!n->is_floating_point()) fail(sec, key, "expected a number, got " + type_name(*n));
    return n->as_floating_point()->get();
  }
  bool get_bool(const std::string& sec, const std::string& key, bool def) {
    const toml::node* n = node(sec, key);
    if (!n) return def;
    if (!n->is_boolean()) fail(sec, key, "expected true or false, got " + type_name(*n));
    return n->as_boolean()->get();
  }
  std::string get_string(const std::string& sec, const std::string& key, const std::string& def) {
    const toml::node* n = node(sec, key);
    if (!n) return def;
    if (!n->is_string()) fail(sec, key, "expected a string, got " + type_name(*n));
    return n->as_string()->get();
  }
  std::string get_choice(const std::string& sec, const std::string& key, const std::string& def,
                         const std::vector<std::string>& choices) {
    const std::string v = get_string(sec, key, def);
    if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
    const std::string near = nearest(v, choices);
    fail(sec, key, "\"" + v + "\" is not one of " + list +
                       (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
  }
  std::vector<std::string> get_strings(const std::string& sec, const std::string& key) {
    const toml::node* n = node(sec, key);
    std::vector<std::string> out;
    if (!n) return out;
    if (n->is_string()) return {n->as_string()->get()};
    if (!n->is_array()) fail(sec, key, "expected a list of paths, got " + type_name(*n));
    for (const toml::node& e : *n->as_array()) {
      if (!e.is_string()) fail(sec, key, "expected a list of strings, found " + type_name(e));
      out.push_back(e.as_string()->get());
    }
    return out;
  }
  bool present(const std::string& sec, const std::string& key) {
    node(sec, key);
    const toml::node* s = root_.get(sec);
    return s && s->is_table() && s->as_table()->contains(key);
  }

  // Unknown sections and keys: the first one found is an error.
  void check_unknown() const {
    std::vector<std::string> sections;
    for (const auto& [name, keys] : kSchema) sections.push_back(name);
    for (auto&& [k, v] : root_) {
      const std::string sec(k.str());
      const auto it = std::find_if(kSchema.begin(), kSchema.end(),
                                   [&](const auto& e) { return e.first == sec; });
      if (it == kSchema.end()) {
        const std::string near = nearest(sec, sections);
        const int line = v.source().begin.line;
        throw RecipeError((line > 0 ? file_ + ":" + std::to_string(line) : file_) +
                          ": unknown section [" + sec + "]" +
                          (near.empty() ? "" : " (did you mean [" + near + "]?)"));
      }
      if (!v.is_table())
        throw RecipeError(file_ + ": \"" + sec + "\" must be a table ([" + sec + "])");
      const std::vector<std::string>& known = it->second;
      for (auto&& [kk, vv] : *v.as_table()) {
        const std::string key(kk.str());
        if (std::find(known.begin(), known.end(), key) != known.end()) continue;
        const std::string near = nearest(key, known);
        fail(sec, key, "unknown key" + (near.empty() ? std::string() : " (did you mean \"" + near + "\"?)"));
      }
    }
  }

 private:
  static std::string type_name(const toml::node& n) {
    switch (n.type()) {
      case toml::node_type::string: return "a string";
      case toml::node_type::integer: return "an integer";
      case toml::node_type::floating_point: return "a float";
      case toml::node_type::boolean: return "a boolean";
      case toml::node_type::array: return "an array";
      case toml::node_type::table: return "a table";
      default: return "a date/time";
    }
  }
  toml::table& root_;
  std::string file_;
  std::set<std::string> overridden_;
};

// Applies "section.key=value" overrides; values parse as TOML, else as a string.
std::set<std::string> apply_overrides(toml::table& root, const std::vector<std::string>& ov) {
  std::set<std::string> done;
  for (const std::string& o : ov) {
    const size_t eq = o.find('='), dot = o.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      throw RecipeError("--set " + o + ": expected section.key=value (e.g. --set training.steps=50)");
    const std::string sec = o.substr(0, dot), key = o.substr(dot + 1, eq - dot - 1);
    const std::string val = o.substr(eq + 1);
    if (sec.empty() || key.empty())
      throw RecipeError("--set " + o + ": expected section.key=value");
    toml::table parsed;
    try {
      parsed = toml::parse("v = " + val);
    } catch (const toml::parse_error&) {
      parsed.insert_or_assign("v", val);  // bare words are strings
    }
    if (!root.contains(sec)) root.insert(sec, toml::table{});
    toml::table* t = root.get(sec)->as_table();
    if (!t) throw RecipeError("--set " + o + ": [" + sec + "] is not a table in the recipe");
    t->insert_or_assign(key, *parsed.get("v"));
    done.insert(sec + "." + key);
  }
  return done;
}

}  // namespace

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size, bool need_data) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    std::ostringstream os;
    os << path;
    if (src.begin.line > 0) os << ":" << src.begin.line << ":" << src.begin.column;
    os << ": " << (std::string(e.description()).find("File could not be opened") != std::string::npos
                       ? "cannot read the recipe file"
                       : "invalid TOML: " + std::string(e.description()));
    throw RecipeError(os.str());
  }
  RecipeReader rd(root, path, apply_overrides(root, overrides));
  rd.check_unknown();
  Recipe r;
  r.path = path;

  // [run]
  r.run.name = rd.get_string("run", "name", r.run.name);
  r.run.dir = rd.get_string("run", "dir", "runs/" + r.run.name);
  const long seed = rd.get_int("run", "seed", (long)r.run.seed);
  if (seed < 0) rd.fail("run", "seed", "must be >= 0");
  r.run.seed = (uint64_t)seed;
  if (r.run.dir.empty()) rd.fail("run", "dir", "must not be empty");

  // [model]
  ModelConfig& m = r.model;
  m.arch = rd.get_choice("model", "arch", "gpt2", {"gpt2", "llama"}) == "gpt2" ? Arch::GPT2 : Arch::Llama;
  m.vocab_size = (int)rd.get_int("model", "vocab_size", m.vocab_size);
  m.d_model = (int)rd.get_int("model", "d_model", m.d_model);
  m.n_layers = (int)rd.get_int("model", "n_layers", m.n_layers);
  m.n_heads = (int)rd.get_int("model", "n_heads", m.n_heads);
  m.n_kv_heads = (int)rd.get_int("model", "n_kv_heads", m.n_heads);
  if (m.arch == Arch::GPT2 && rd.present("model", "n_kv_heads") && m.n_kv_heads != m.n_heads)
    rd.fail("model", "n_kv_heads", "grouped-query attention needs arch = \"llama\" (gpt2 uses n_heads)");
  m.d_ff = (int)rd.get_int("model", "d_ff", 4L * m.d_model);
  m.seq_len = (int)rd.get_int("model", "seq_len", m.seq_len);
  m.tie_embeddings = rd.get_bool("model", "tie_embeddings", m.arch == Arch::GPT2);
  m.norm_eps = (float)rd.get_float("model", "norm_eps", m.arch == Arch::GPT2 ? 1e-5 : 1e-6);
  m.rope_theta = (float)rd.get_float("model", "rope_theta", 10000.0);
  for (const auto& [key, msg] : validate(m)) rd.fail("model", key, msg);
  if (m.norm_eps <= 0) rd.fail("model", "norm_eps", "must be > 0");
  if (m.rope_theta <= 1) rd.fail("model", "rope_theta", "must be > 1");

  // [parallel]
  r.grid.tp = (int)rd.get_int("parallel", "tp", 1);
  r.grid.pp = (int)rd.get_int("parallel", "pp", 1);
  if (r.grid.tp < 1) rd.fail("parallel", "tp", "must be >= 1");
  if (r.grid.pp < 1) rd.fail("parallel", "pp", "must be >= 1");
  const bool dp_given = rd.present("parallel", "dp");
  const int model_ranks = r.grid.tp * r.grid.pp;
  if (!dp_given && world_size > 0 && world_size % model_ranks != 0) {
    // dp is what the launch leaves: say how to launch rather than "dp = 0".
    rd.fail("parallel", rd.present("parallel", "tp") ? "tp" : "pp",
            "pp * tp = " + std::to_string(model_ranks) + " ranks hold one model copy, so the job needs a multiple of " +
                std::to_string(model_ranks) + " ranks (dp = ranks / (pp * tp)); it was launched with " +
                std::to_string(world_size) + ": use mpirun -np " + std::to_string(model_ranks) + " (or " +
                std::to_string(2 * model_ranks) + ", ...), or lower parallel.pp / parallel.tp");
  }
  r.grid.dp = (int)rd.get_int("parallel", "dp", world_size > 0 ? world_size / model_ranks : 1);
  if (r.grid.dp < 1) rd.fail("parallel", "dp", "must be >= 1");
  if (world_size > 0 && r.grid.dp * r.grid.pp * r.grid.tp != world_size)
    rd.fail("parallel", dp_given ? "dp" : "tp",
            "dp * pp * tp = " + std::to_string(r.grid.dp) + " * " + std::to_string(r.grid.pp) +
                " * " + std::to_string(r.grid.tp) + " = " +
                std::to_string(r.grid.dp * r.grid.pp * r.grid.tp) +
                " does not match the " + std::to_string(world_size) +
                " ranks this job was launched with");

  for (const auto& [key, msg] : validate_tp(m, r.grid.tp)) rd.fail("model", key, msg);
  r.sequence_parallel = rd.get_bool("parallel", "sequence_parallel", false);
  if (r.sequence_parallel && m.seq_len % r.grid.tp != 0)
    rd.fail("parallel", "sequence_parallel",
            "needs model.seq_len = " + std::to_string(m.seq_len) + " divisible by tp = " +
                std::to_string(r.grid.tp));

  r.schedule = rd.get_choice("parallel", "schedule", "1f1b", {"1f1b", "interleaved"}) == "1f1b"
                   ? ScheduleKind::OneFOneB
                   : ScheduleKind::Interleaved;
  r.virtual_stages = (int)rd.get_int("parallel", "virtual_stages", r.schedule == ScheduleKind::Interleaved ? 2 : 1);
  if (r.schedule == ScheduleKind::OneFOneB && r.virtual_stages != 1)
    rd.fail("parallel", "virtual_stages", "the \"1f1b\" schedule has one chunk per stage; use schedule = \"interleaved\" for virtual_stages > 1");
  if (r.schedule == ScheduleKind::Interleaved && (r.virtual_stages < 2 || r.grid.pp < 2))
    rd.fail("parallel", "virtual_stages", "the interleaved schedule needs pp >= 2 and virtual_stages >= 2");
  if (m.n_layers % (r.grid.pp * r.virtual_stages) != 0)
    rd.fail("parallel", "pp", "n_layers = " + std::to_string(m.n_layers) + " must be divisible by pp * virtual_stages = " +
                                  std::to_string(r.grid.pp) + " * " + std::to_string(r.virtual_stages));

  // [training]
  TrainingSection& t = r.training;
  t.steps = rd.get_int("training", "steps", t.steps);
  t.micro_batch = (int)rd.get_int("training", "micro_batch", t.micro_batch);
  t.global_batch = (int)rd.get_int("training", "global_batch", (long)t.micro_batch * r.grid.dp);
  t.grad_clip = (float)rd.get_float("training", "grad_clip", t.grad_clip);
  t.eval_every = (int)rd.get_int("training", "eval_every", t.eval_every);
  t.eval_batches = (int)rd.get_int("training", "eval_batches", t.eval_batches);
  t.log_every = (int)rd.get_int("training", "log_every", t.log_every);
  t.exit_after = rd.get_int("training", "exit_after", 0);
  if (t.steps < 1) rd.fail("training", "steps", "must be >= 1");
  if (t.micro_batch < 1) rd.fail("training", "micro_batch", "must be >= 1");
  if (t.global_batch < 1) rd.fail("training", "global_batch", "must be >= 1");
  if (t.global_batch % (t.micro_batch * r.grid.dp) != 0)
    rd.fail("training", "global_batch",
            std::to_string(t.global_batch) + " is not divisible by micro_batch * dp = " +
                std::to_string(t.micro_batch) + " * " + std::to_string(r.grid.dp) + " = " +
                std::to_string(t.micro_batch * r.grid.dp) +
                " (gradient accumulation needs a whole number of micro-batches per rank)");
  if (t.grad_clip < 0) rd.fail("training", "grad_clip", "must be >= 0 (0 disables clipping)");
  if (r.schedule == ScheduleKind::Interleaved && r.accum_steps() % r.grid.pp != 0)
    rd.fail("training", "global_batch",
            "the interleaved schedule needs the micro-batches per step, global_batch / (micro_batch * dp) = " +
                std::to_string(r.accum_steps()) + ", to be a multiple of pp = " + std::to_string(r.grid.pp));
  if (t.eval_every < 0) rd.fail("training", "eval_every", "must be >= 0");
  if (t.eval_batches < 1) rd.fail("training", "eval_batches", "must be >= 1");
  if (t.log_every < 1) rd.fail("training", "log_every", "must be >= 1");
  if (t.exit_after < 0) rd.fail("training", "exit_after", "must be >= 0 (0: run to training.steps)");
  auto bad_step = [&](const char* key, const char* def) {
    const std::string v = rd.get_choice("training", key, def, {"stop", "skip", "rollback"});
    return v == "stop" ? TrainingSection::BadStep::Stop
           : v == "skip" ? TrainingSection::BadStep::Skip : TrainingSection::BadStep::Rollback;
  };
  t.on_nan = bad_step("on_nan", "stop");
  t.on_spike = bad_step("on_spike", "skip");
  t.spike_factor = rd.get_float("training", "spike_factor", t.spike_factor);
  t.spike_window = (int)rd.get_int("training", "spike_window", t.spike_window);
  if (t.spike_factor != 0 && t.spike_factor <= 1)
    rd.fail("training", "spike_factor", "must be > 1 (a loss that many times the recent median is a spike), or 0: off");
  if (t.spike_window < 5) rd.fail("training", "spike_window", "must be >= 5 steps");

  // [optimizer]
  LrConfig& lr = r.lr;
  lr.lr = (float)rd.get_float("optimizer", "lr", lr.lr);
  lr.min_lr = (float)rd.get_float("optimizer", "min_lr", lr.lr * 0.1);
  lr.warmup_steps = (int)rd.get_int("optimizer", "warmup_steps", 0);
  const std::string sched = rd.get_choice("optimizer", "schedule", "cosine", {"cosine", "linear", "constant"});
  lr.schedule = sched == "cosine" ? LrSchedule::Cosine : sched == "linear" ? LrSchedule::Linear : LrSchedule::Constant;
  r.adamw.weight_decay = (float)rd.get_float("optimizer", "weight_decay", r.adamw.weight_decay);
  r.adamw.beta1 = (float)rd.get_float("optimizer", "beta1", r.adamw.beta1);
  r.adamw.beta2 = (float)rd.get_float("optimizer", "beta2", r.adamw.beta2);
  r.adamw.eps = (float)rd.get_float("optimizer", "eps", r.adamw.eps);
  if (!(lr.lr > 0)) rd.fail("optimizer", "lr", "must be > 0");
  if (lr.min_lr < 0 || lr.min_lr > lr.lr) rd.fail("optimizer", "min_lr", "must be in [0, lr]");
  if (lr.warmup_steps < 0) rd.fail("optimizer", "warmup_steps", "must be >= 0");
  if (lr.warmup_steps > t.steps)
    rd.fail("optimizer", "warmup_steps", std::to_string(lr.warmup_steps) + " is more than training.steps = " + std::to_string(t.steps));
  if (r.adamw.weight_decay < 0) rd.fail("optimizer", "weight_decay", "must be >= 0");
  if (r.adamw.beta1 < 0 || r.adamw.beta1 >= 1) rd.fail("optimizer", "beta1", "must be in [0, 1)");
  if (r.adamw.beta2 < 0 || r.adamw.beta2 >= 1) rd.fail("optimizer", "beta2", "must be in [0, 1)");
  if (!(r.adamw.eps > 0)) rd.fail("optimizer", "eps", "must be > 0");

  // [recompute]
  const std::string rmode = rd.get_choice("recompute", "mode", "none", {"none", "selective", "full"});
  r.recompute.mode = rmode == "none" ? RecomputeMode::None
                     : rmode == "selective" ? RecomputeMode::Selective : RecomputeMode::Full;
  r.recompute.layers = (int)rd.get_int("recompute", "layers", -1);
  if (r.recompute.layers < -1 || r.recompute.layers == 0)
    rd.fail("recompute", "layers", "must be a positive number of layers per chunk (or -1: all)");

  // [checkpoint]
  CheckpointSection& ck = r.checkpoint;
  ck.every = (int)rd.get_int("checkpoint", "every", 0);
  ck.dir = rd.get_string("checkpoint", "dir", r.run.dir + "/checkpoints");
  ck.keep = (int)rd.get_int("checkpoint", "keep", 3);
  ck.resume = rd.get_string("checkpoint", "resume", "auto");
  ck.required = rd.get_bool("checkpoint", "required", false);
  ck.async = rd.get_bool("checkpoint", "async", false);
  ck.allow_changes = rd.get_strings("checkpoint", "allow_changes");
  if (ck.every < 0) rd.fail("checkpoint", "every", "must be >= 0 (0: no checkpoints)");
  if (ck.keep < 0) rd.fail("checkpoint", "keep", "must be >= 0 (0: keep all)");
  if (ck.dir.empty()) rd.fail("checkpoint", "dir", "must not be empty");

  // [runtime]
  r.runtime.threads = (int)rd.get_int("runtime", "threads", r.runtime.threads);
  r.runtime.backend = rd.get_choice("runtime", "backend", "cpu", {"cpu"});
  r.runtime.peak_gflops = rd.get_float("runtime", "peak_gflops", 0.0);
  if (r.runtime.threads < 1) rd.fail("runtime", "threads", "must be >= 1");
  if (r.runtime.peak_gflops < 0) rd.fail("runtime", "peak_gflops", "must be >= 0 (0: measure)");
  r.runtime.comm_timeout = rd.get_float("runtime", "comm_timeout", r.runtime.comm_timeout);
  r.runtime.straggler_factor = rd.get_float("runtime", "straggler_factor", r.runtime.straggler_factor);
  r.runtime.straggler_every = (int)rd.get_int("runtime", "straggler_every", r.runtime.straggler_every);
  if (r.runtime.comm_timeout < 0) rd.fail("runtime", "comm_timeout", "must be >= 0 seconds (0: no watchdog)");
  if (r.runtime.straggler_factor != 0 && r.runtime.straggler_factor <= 1)
    rd.fail("runtime", "straggler_factor", "must be > 1 (a ratio to the median), or 0 to turn the report off");
  if (r.runtime.straggler_every < 1) rd.fail("runtime", "straggler_every", "must be >= 1");

  // [supervisor], [launch]: read by `trainer supervise`, checked for everyone.
  SupervisorSection& sv = r.supervisor;
  sv.max_restarts = (int)rd.get_int("supervisor", "max_restarts", sv.max_restarts);
  sv.hang_timeout = rd.get_float("supervisor", "hang_timeout", sv.hang_timeout);
  sv.backoff = rd.get_float("supervisor", "backoff", sv.backoff);
  sv.backoff_max = rd.get_float("supervisor", "backoff_max", sv.backoff_max);
  if (sv.max_restarts < 0) rd.fail("supervisor", "max_restarts", "must be >= 0");
  if (sv.hang_timeout < 0) rd.fail("supervisor", "hang_timeout", "must be >= 0 seconds (0: no hang detection)");
  if (sv.backoff < 0) rd.fail("supervisor", "backoff", "must be >= 0 seconds");
  if (sv.backoff_max < sv.backoff) rd.fail("supervisor", "backoff_max", "must be >= supervisor.backoff");
  LaunchSection& la = r.launch;
  la.launcher = rd.get_choice("launch", "launcher", la.launcher, {"mpirun", "srun"});
  la.ranks = (int)rd.get_int("launch", "ranks", 0);
  la.args = rd.get_strings("launch", "args");
  if (la.ranks < 0) rd.fail("launch", "ranks", "must be >= 0 (0: parallel.dp * pp * tp)");

  // [fault]: test-only fault injection (app/fault.h).
  r.fault_specs = rd.get_strings("fault", "inject");
  for (const std::string& spec : r.fault_specs) {
    try {
      for (Fault& f : parse_faults(spec, "")) r.faults.push_back(std::move(f));
    } catch (const RecipeError& e) {
      rd.fail("fault", "inject", std::string(e.what()).substr(2));  // drop parse_faults' empty "where: "
    }
  }

  // [data]
  r.data.train = rd.get_strings("data", "train");
  r.data.val = rd.get_strings("data", "val");
  r.data.prefetch = (int)rd.get_int("data", "prefetch", r.data.prefetch);
  if (r.data.prefetch < 0) rd.fail("data", "prefetch", "must be >= 0 (0: load on the training thread)");

  if (!need_data) return r;

  if (r.data.train.empty()) rd.fail("data", "train", "no training data: give a list of token shard paths or globs");
  if (r.training.eval_every > 0 && r.data.val.empty())
    rd.fail("training", "eval_every", "evaluation every " + std::to_string(r.training.eval_every) +
                                          " steps needs validation data: set [data] val, or eval_every = 0");
  try {
    r.data.train_files = expand_paths(r.data.train);
  } catch (const DataError& e) {
    rd.fail("data", "train", e.what());
  }
  try {
    if (!r.data.val.empty()) r.data.val_files = expand_paths(r.data.val);
  } catch (const DataError& e) {
    rd.fail("data", "val", e.what());
  }
  return r;
}

namespace {
// float -> the double with the same short decimal form (3e-4f prints as 0.0003).
double nice(float f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.7g", f);
  return std::strtod(b, nullptr);
}
const char* bad_step_name(TrainingSection::BadStep b) {
  return b == TrainingSection::BadStep::Stop ? "stop" : b == TrainingSection::BadStep::Skip ? "skip" : "rollback";
}
}  // namespace

RunFacts read_run_facts(const std::string& path) {
  RunFacts f;
  try {
    const toml::table t = toml::parse_file(path);
    f.steps = t["training"]["steps"].value_or<int64_t>(0);
    f.checkpoint_every = t["checkpoint"]["every"].value_or<int64_t>(-1);
    f.checkpoint_dir = t["checkpoint"]["dir"].value_or<std::string>("");
  } catch (const std::exception&) {
  }
  return f;
}

namespace {
// "section.key" -> value as TOML text, for the sections that define a run.
std::map<std::string, std::string> flatten(const toml::table& t) {
  static const std::set<std::string> skip_sections = {"checkpoint", "supervisor", "launch", "fault"};
  static const std::set<std::string> skip_keys = {"run.name", "run.dir"};
  std::map<std::string, std::string> out;
  for (auto&& [sec, v] : t) {
    if (skip_sections.count(std::string(sec.str())) || !v.is_table()) continue;
    for (auto&& [key, val] : *v.as_table()) {
      const std::string full = std::string(sec.str()) + "." + std::string(key.str());
      if (skip_keys.count(full)) continue;
      std::ostringstream os;
      if (val.is_floating_point()) {
        char b[40];
        std::snprintf(b, sizeof b, "%.7g", val.as_floating_point()->get());  // as float32 holds it
        os << b;
      } else {
        val.visit([&](auto&& n) { os << n; });
      }
      out[full] = os.str();
    }
  }
  return out;
}
}  // namespace

std::vector<RecipeChange> recipe_changes(const std::string& old_text, const Recipe& now) {
  toml::table old_t, new_t;
  try {
    old_t = toml::parse(old_text);
    std::string text = recipe_to_toml(now);
    new_t = toml::parse(text);
  } catch (const toml::parse_error& e) {
    throw RecipeError(std::string("the checkpoint's recipe.toml is not readable TOML: ") + e.what());
  }
  const auto a = flatten(old_t), b = flatten(new_t);
  std::vector<RecipeChange> out;
  for (const auto& [k, v] : a) {
    const auto it = b.find(k);
    if (it == b.end()) out.push_back({k, v, "(absent)"});
    else if (it->second != v) out.push_back({k, v, it->second});
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back({k, "(absent)", v});
  return out;
}

std::string recipe_to_toml(const Recipe& r) {
  auto list = [](const std::vector<std::string>& v) {
    toml::array a;
    for (const auto& s : v) a.push_back(s);
    return a;
  };
  const ModelConfig& m = r.model;
  toml::table model{{"arch", arch_name(m.arch)},  {"vocab_size", m.vocab_size},
                    {"d_model", m.d_model},       {"n_layers", m.n_layers},
                    {"n_heads", m.n_heads},       {"d_ff", m.d_ff},
                    {"seq_len", m.seq_len},       {"tie_embeddings", m.tie_embeddings},
                    {"norm_eps", nice(m.norm_eps)}};
  if (m.arch == Arch::Llama) {
    model.insert("n_kv_heads", m.n_kv_heads);
    model.insert("rope_theta", nice(m.rope_theta));
  }
  toml::table root{
      {"run", toml::table{{"name", r.run.name}, {"dir", r.run.dir}, {"seed", (int64_t)r.run.seed}}},
      {"model", model},
      {"data", toml::table{{"train", list(r.data.train)}, {"val", list(r.data.val)}, {"prefetch", r.data.prefetch}}},
      {"training", toml::table{{"steps", (int64_t)r.training.steps},
                               {"global_batch", r.training.global_batch},
                               {"micro_batch", r.training.micro_batch},
                               {"grad_clip", nice(r.training.grad_clip)},
                               {"eval_every", r.training.eval_every},
                               {"eval_batches", r.training.eval_batches},
                               {"log_every", r.training.log_every},
                               {"exit_after", (int64_t)r.training.exit_after},
                               {"on_nan", bad_step_name(r.training.on_nan)},
                               {"spike_factor", r.training.spike_factor},
                               {"spike_window", r.training.spike_window},
                               {"on_spike", bad_step_name(r.training.on_spike)}}},
      {"optimizer", toml::table{{"lr", nice(r.lr.lr)},
                                {"min_lr", nice(r.lr.min_lr)},
                                {"warmup_steps", r.lr.warmup_steps},
                                {"schedule", schedule_name(r.lr.schedule)},
                                {"weight_decay", nice(r.adamw.weight_decay)},
                                {"beta1", nice(r.adamw.beta1)},
                                {"beta2", nice(r.adamw.beta2)},
                                {"eps", nice(r.adamw.eps)}}},
      {"parallel", toml::table{{"dp", r.grid.dp}, {"pp", r.grid.pp}, {"tp", r.grid.tp},
                               {"sequence_parallel", r.sequence_parallel},
                               {"schedule", r.schedule == ScheduleKind::OneFOneB ? "1f1b" : "interleaved"},
                               {"virtual_stages", r.virtual_stages}}},
      {"recompute", toml::table{{"mode", recompute_name(r.recompute.mode)}, {"layers", r.recompute.layers}}},
      {"checkpoint", toml::table{{"every", r.checkpoint.every}, {"dir", r.checkpoint.dir},
                                 {"keep", r.checkpoint.keep}, {"resume", r.checkpoint.resume},
                                 {"required", r.checkpoint.required}, {"async", r.checkpoint.async},
                                 {"allow_changes", list(r.checkpoint.allow_changes)}}},
      {"runtime", toml::table{{"threads", r.runtime.threads},
                              {"backend", r.runtime.backend},
                              {"peak_gflops", r.runtime.peak_gflops},
                              {"comm_timeout", r.runtime.comm_timeout},
                              {"straggler_factor", r.runtime.straggler_factor},
                              {"straggler_every", r.runtime.straggler_every}}},
      {"supervisor", toml::table{{"max_restarts", r.supervisor.max_restarts},
                                 {"hang_timeout", r.supervisor.hang_timeout},
                                 {"backoff", r.supervisor.backoff},
                                 {"backoff_max", r.supervisor.backoff_max}}},
      {"launch", toml::table{{"launcher", r.launch.launcher}, {"ranks", r.launch.ranks},
                             {"args", list(r.launch.args)}}},
  };
  if (!r.fault_specs.empty()) root.insert("fault", toml::table{{"inject", list(r.fault_specs)}});
  std::ostringstream os;
  os << "# Resolved recipe (defaults filled in, overrides applied) from " << r.path << "\n"
     << root << "\n";
  return os.str();
}

}  // namespace trainer
