// TOML -> Recipe. Every key is declared by the get() call that reads it, so
// unknown keys (typos) are found by comparing what the file has with what was
// read, and the nearest known name is suggested.
#include "app/recipe.h"
#include "app/recipe_keys.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "data/dataset.h"
#include "model/param_registry.h"
#include "runtime/errors.h"
#include "runtime/regular_file.h"

namespace trainer {

std::string toml_library_version() {
  return std::to_string(TOML_LIB_MAJOR) + "." + std::to_string(TOML_LIB_MINOR) + "." + std::to_string(TOML_LIB_PATCH);
}

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

  const toml::node* node(const std::string& sec, const std::string& key) const {
    const toml::node* s = root_.get(sec);
    return s ? s->as_table()->get(key) : nullptr;
  }

  // The value a recipe gives for a key, type-checked (not range-checked).
  KeyValue read(const RecipeKey& k, const toml::node& n) const {
    const std::string &sec = k.section, &key = k.name;
    switch (k.type) {
      case KeyType::Int:
        if (!k.auto_word.empty() && n.is_string() && n.as_string()->get() == k.auto_word) return k.auto_value;
        if (!n.is_integer())
          fail(sec, key, "expected an integer" + (k.auto_word.empty() ? "" : " or \"" + k.auto_word + "\"") +
                             ", got " + type_name(n));
        return (long)n.as_integer()->get();
      case KeyType::Float:
        if (n.is_integer()) return (double)n.as_integer()->get();
        if (!n.is_floating_point()) fail(sec, key, "expected a number, got " + type_name(n));
        return n.as_floating_point()->get();
      case KeyType::Bool:
        if (!n.is_boolean()) fail(sec, key, "expected true or false, got " + type_name(n));
        return n.as_boolean()->get();
      case KeyType::String:
        if (!n.is_string()) fail(sec, key, "expected a string, got " + type_name(n));
        return no_nul(k, n.as_string()->get());
      case KeyType::Choice: {
        if (!n.is_string()) fail(sec, key, "expected a string, got " + type_name(n));
        const std::string v = n.as_string()->get();
        if (std::find(k.choices.begin(), k.choices.end(), v) != k.choices.end()) return v;
        const std::string near = nearest(v, k.choices);
        fail(sec, key, "\"" + v + "\" is not one of " + k.allowed() +
                           (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
      }
      case KeyType::RopeScaling:
        return rope_scaling(k, n);
      case KeyType::Sources: {
        if (n.is_string()) return std::vector<DataSource>{{no_nul(k, n.as_string()->get()), 0, "", {}}};
        if (!n.is_array()) fail(sec, key, "expected a list of paths or { path, weight, name } tables, got " + type_name(n));
        std::vector<DataSource> out;
        for (const toml::node& e : *n.as_array()) out.push_back(source(k, e));
        return out;
      }
      case KeyType::List: {
        if (n.is_string()) return std::vector<std::string>{n.as_string()->get()};
        if (!n.is_array()) fail(sec, key, "expected a list of strings, got " + type_name(n));
        std::vector<std::string> out;
        for (const toml::node& e : *n.as_array()) {
          if (!e.is_string()) fail(sec, key, "expected a list of strings, found " + type_name(e));
          out.push_back(no_nul(k, e.as_string()->get()));
        }
        return out;
      }
    }
    return 0L;
  }
  // A RopeScaling key: {} (none), { rope_type = "default" }, or llama3 with
  // its four fields (all required, as in Hugging Face's config.json). The
  // other types transformers knows change the positions differently and are
  // refused by name rather than trained as plain RoPE.
  RopeScaling rope_scaling(const RecipeKey& k, const toml::node& n) const {
    const auto bad = [&](const std::string& why) { fail(k.section, k.name, why); };
    if (!n.is_table()) bad("expected an inline table (" + k.allowed() + "), got " + type_name(n));
    const toml::table& t = *n.as_table();
    RopeScaling s;
    if (t.empty()) return s;
    const toml::node* type = t.get("rope_type");
    if (!type || !type->is_string()) bad("rope_type: expected a string (\"llama3\")");
    const std::string name = type->as_string()->get();
    if (name == "default" && t.size() == 1) return s;
    if (name == "linear" || name == "dynamic" || name == "yarn" || name == "longrope" || name == "su" ||
        name == "mrope" || name == "default")
      bad("rope_type \"" + name + "\" is not implemented (the trainer has \"llama3\" only)");
    if (name != "llama3") bad("unknown rope_type \"" + name + "\" (the trainer has \"llama3\")");
    s.type = RopeScaling::Type::Llama3;
    const auto number = [&](const char* f, double& out) {
      const toml::node* v = t.get(f);
      if (!v) bad(std::string(f) + ": missing (llama3 scaling needs factor, low_freq_factor, high_freq_factor and "
                  "original_max_position_embeddings)");
      if (v->is_integer()) out = (double)v->as_integer()->get();
      else if (v->is_floating_point()) out = v->as_floating_point()->get();
      else bad(std::string(f) + ": expected a number, got " + type_name(*v));
    };
    double orig = 0;
    number("factor", s.factor), number("low_freq_factor", s.low_freq_factor);
    number("high_freq_factor", s.high_freq_factor), number("original_max_position_embeddings", orig);
    if (orig != std::floor(orig) || orig < 1 || orig > 2147483647.0)
      bad("original_max_position_embeddings: expected a positive integer, got " + std::to_string(orig));
    s.original_max_position_embeddings = (int)orig;
    for (auto&& [f, v] : t) {
      const std::string field(f.str());
      if (field != "rope_type" && field != "factor" && field != "low_freq_factor" && field != "high_freq_factor" &&
          field != "original_max_position_embeddings")
        bad("unknown field \"" + field + "\" (fields: rope_type, factor, low_freq_factor, high_freq_factor, "
            "original_max_position_embeddings)");
    }
    return s;
  }
  // Strings go to C APIs (paths, names) that stop at a NUL byte, so a value
  // holding one would be cut off silently: refused, shown escaped.
  std::string no_nul(const RecipeKey& k, const std::string& v) const {
    if (v.find('\0') != std::string::npos)
      fail(k.section, k.name, toml_text(v, KeyType::String) + " contains a NUL byte");
    return v;
  }
  // One entry of a Sources key: "path" or { path = "...", weight = W, name = "..." }.
  DataSource source(const RecipeKey& k, const toml::node& e) const {
    if (e.is_string()) return {no_nul(k, e.as_string()->get()), 0, "", {}};
    if (!e.is_table()) fail(k.section, k.name, "expected a path or a { path, weight, name } table, found " + type_name(e));
    DataSource s;
    for (auto&& [kk, v] : *e.as_table()) {
      const std::string f(kk.str());
      if (f == "path" && v.is_string()) s.path = no_nul(k, v.as_string()->get());
      else if (f == "name" && v.is_string()) s.name = v.as_string()->get();
      else if (f == "weight" && (v.is_floating_point() || v.is_integer()))
        s.weight = v.is_integer() ? (double)v.as_integer()->get() : v.as_floating_point()->get();
      else if (f == "path" || f == "name" || f == "weight")
        fail(k.section, k.name, f + ": expected " + (f == "weight" ? "a number" : "a string") + ", got " + type_name(v));
      else
        fail(k.section, k.name, "unknown field \"" + f + "\" in a source (fields: path, weight, name)");
    }
    if (s.weight == 0 && (e.as_table()->contains("weight")))
      fail(k.section, k.name, s.path + ": weight must be > 0");
    return s;
  }
  bool present(const std::string& sec, const std::string& key) const { return node(sec, key) != nullptr; }
  bool overridden(const std::string& sec, const std::string& key) const { return overridden_.count(sec + "." + key) > 0; }

  // Unknown sections and keys: the first one found is an error.
  void check_unknown() const {
    const std::vector<std::string>& sections = recipe_sections();
    for (auto&& [k, v] : root_) {
      const std::string sec(k.str());
      if (std::find(sections.begin(), sections.end(), sec) == sections.end()) {
        const std::string near = nearest(sec, sections);
        const int line = v.source().begin.line;
        throw RecipeError((line > 0 ? file_ + ":" + std::to_string(line) : file_) +
                          ": unknown section [" + sec + "]" +
                          (near.empty() ? "" : " (did you mean [" + near + "]?)"));
      }
      if (!v.is_table())
        throw RecipeError(file_ + ": \"" + sec + "\" must be a table ([" + sec + "])");
      std::vector<std::string> known;
      for (const RecipeKey& rk : recipe_keys())
        if (rk.section == sec) known.push_back(rk.name);
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
    // One TOML value, or a bare word taken as a string (--set launch.launcher=srun). A
    // value that starts as TOML (a quote, list or table) but does not parse,
    // or that holds more than one value, is refused rather than kept as text.
    toml::table parsed;
    const size_t first = val.find_first_not_of(" \t");
    const bool looks_toml = first != std::string::npos && std::string("\"'[{").find(val[first]) != std::string::npos;
    try {
      parsed = toml::parse("v = " + val);
      if (parsed.size() != 1) throw RecipeError("--set " + o + ": the value must be one TOML value, not several");
    } catch (const toml::parse_error& e) {
      if (looks_toml || val.find_first_of("\n\r") != std::string::npos)
        throw RecipeError("--set " + o + ": not one TOML value (" + std::string(e.description()) +
                          "); quote a string: --set " + sec + "." + key + "='\"...\"'");
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

// Rules between keys, in the order a reader would fix them.
void check_rules(Recipe& r, RecipeReader& rd, int world_size) {
  const ModelConfig& m = r.model;
  if (r.run.dir.empty()) rd.fail("run", "dir", "must not be empty");
  // The name is one path component of the default run.dir (runs/NAME) and
  // is printed in logs: no separators, no way up, no control characters.
  const std::string& name = r.run.name;
  const bool control = std::any_of(name.begin(), name.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || control)
    rd.fail("run", "name", toml_text(name, KeyType::String) + " is not one plain path component (no \"/\", not \".\" "
            "or \"..\", no control characters); put directories in run.dir");
  if (m.arch == Arch::GPT2 && rd.present("model", "n_kv_heads") && m.n_kv_heads != m.n_heads)
    rd.fail("model", "n_kv_heads", "grouped-query attention needs arch = \"llama\" (gpt2 uses n_heads)");
  for (const auto& [key, msg] : validate(m)) rd.fail("model", key, msg);

  // [parallel]: dp is what the launch leaves when not given.
  const bool dp_given = rd.present("parallel", "dp");
  const int model_ranks = r.grid.tp * r.grid.pp;
  // The key a layout problem is blamed on: the one the user set (a --set
  // override before a line of the file), tp before pp.
  auto layout_key = [&]() -> std::string {
    for (const char* k : {"tp", "pp"})
      if (rd.overridden("parallel", k)) return k;
    return rd.present("parallel", "tp") ? "tp" : "pp";
  };
  if (!dp_given && world_size > 0 && world_size % model_ranks != 0)
    rd.fail("parallel", layout_key(),
            "pp * tp = " + std::to_string(model_ranks) + " ranks hold one model copy, so the job needs a multiple of " +
                std::to_string(model_ranks) + " ranks (dp = ranks / (pp * tp)); it was launched with " +
                std::to_string(world_size) + ": use mpirun -np " + std::to_string(model_ranks) + " (or " +
                std::to_string(2 * model_ranks) + ", ...), or lower parallel.pp / parallel.tp");
  if (world_size > 0 && r.grid.dp * r.grid.pp * r.grid.tp != world_size)
    rd.fail("parallel", dp_given ? "dp" : layout_key(),
            "dp * pp * tp = " + std::to_string(r.grid.dp) + " * " + std::to_string(r.grid.pp) + " * " +
                std::to_string(r.grid.tp) + " = " + std::to_string(r.grid.dp * r.grid.pp * r.grid.tp) +
                " does not match the " + std::to_string(world_size) + " ranks this job was launched with");
  for (const auto& [key, msg] : validate_tp(m, r.grid.tp)) rd.fail("model", key, msg);
  if (r.sequence_parallel && m.seq_len % r.grid.tp != 0)
    rd.fail("parallel", "sequence_parallel",
            "needs model.seq_len = " + std::to_string(m.seq_len) + " divisible by tp = " + std::to_string(r.grid.tp));
  if (r.schedule == ScheduleKind::OneFOneB && r.virtual_stages != 1)
    rd.fail("parallel", "virtual_stages", "the \"1f1b\" schedule has one chunk per stage; use schedule = \"interleaved\" for virtual_stages > 1");
  if (r.schedule == ScheduleKind::Interleaved && (r.virtual_stages < 2 || r.grid.pp < 2))
    rd.fail("parallel", "virtual_stages", "the interleaved schedule needs pp >= 2 and virtual_stages >= 2");
  if (m.n_layers % (r.grid.pp * r.virtual_stages) != 0)
    rd.fail("parallel", rd.overridden("parallel", "virtual_stages") ? "virtual_stages" : "pp",
            "n_layers = " + std::to_string(m.n_layers) + " must be divisible by pp * virtual_stages = " +
                std::to_string(r.grid.pp) + " * " + std::to_string(r.virtual_stages));

  // [training], [optimizer]
  const TrainingSection& t = r.training;
  const long per_step = (long)t.micro_batch * r.grid.dp;  // both may be near 2^31
  if (t.global_batch % per_step != 0)
    rd.fail("training", "global_batch",
            std::to_string(t.global_batch) + " is not divisible by micro_batch * dp = " +
                std::to_string(t.micro_batch) + " * " + std::to_string(r.grid.dp) + " = " +
                std::to_string(per_step) + " (gradient accumulation needs a whole number of micro-batches per rank)");
  if ((long)t.micro_batch * m.seq_len > Recipe::kMaxMicroBatchTokens)
    rd.fail("training", "micro_batch",
            std::to_string(t.micro_batch) + " x model.seq_len " + std::to_string(m.seq_len) + " = " +
                std::to_string((long)t.micro_batch * m.seq_len) + " tokens in one micro-batch: more than " +
                std::to_string(Recipe::kMaxMicroBatchTokens) + ", the most one tensor is indexed by");
  if (r.accum_steps() > Recipe::kMaxAccumSteps)
    rd.fail("training", "global_batch",
            "global_batch / (micro_batch * dp) = " + std::to_string(r.accum_steps()) +
                " micro-batches per step: more than " + std::to_string(Recipe::kMaxAccumSteps) +
                " (raise training.micro_batch or parallel.dp)");
  if (r.schedule == ScheduleKind::Interleaved && r.accum_steps() % r.grid.pp != 0)
    rd.fail("training", "global_batch",
            "the interleaved schedule needs the micro-batches per step, global_batch / (micro_batch * dp) = " +
                std::to_string(r.accum_steps()) + ", to be a multiple of pp = " + std::to_string(r.grid.pp));
  if (r.lr.min_lr > r.lr.lr) rd.fail("optimizer", "min_lr", "must be in [0, lr]: at most lr = " + toml_text((double)r.lr.lr, KeyType::Float));
  if (r.lr.warmup_steps > t.steps)  // legal (the run never reaches the peak rate), rarely meant
    r.warnings.push_back(rd.where("optimizer", "warmup_steps") + ": [optimizer] warmup_steps = " +
                         std::to_string(r.lr.warmup_steps) + " is more than training.steps = " + std::to_string(t.steps) +
                         ": the learning rate never reaches its peak " + toml_text((double)r.lr.lr, KeyType::Float));
  if (r.recompute.layers == 0)
    rd.fail("recompute", "layers", "must be a positive number of layers per chunk (or -1: all)");
  if (r.checkpoint.dir.empty()) rd.fail("checkpoint", "dir", "must not be empty");
  if (r.supervisor.backoff_max < r.supervisor.backoff) rd.fail("supervisor", "backoff_max", "must be >= supervisor.backoff");
  if (t.exit_after > 0 && r.checkpoint.every == 0)
    r.warnings.push_back(rd.where("training", "exit_after") + ": [training] exit_after = " + std::to_string(t.exit_after) +
                         " stops this launch early, but checkpoint.every = 0 saves nothing to resume from");
  if (t.eval_every > 0 && r.data.val.empty())
    rd.fail("training", "eval_every", "evaluation every " + std::to_string(t.eval_every) +
                                          " steps needs validation data: set [data] val, or eval_every = 0");
}

// [data]: the files the globs name exist now.
void check_data(Recipe& r, RecipeReader& rd) {
  if (r.data.train.empty()) rd.fail("data", "train", "no training data: give a list of token shard paths or globs");
  auto expand = [&](std::vector<DataSource>& list, std::vector<std::string>& all, const char* key) {
    try {
      for (DataSource& s : list) {
        s.files = expand_paths({s.path});
        for (const std::string& f : s.files)  // plain entries form one source: each file once
          if (std::find(all.begin(), all.end(), f) == all.end()) all.push_back(f);
      }
    } catch (const DataError& e) {
      throw DataError(rd.where("data", key) + ": [data] " + key + ": " + e.what());
    }
  };
  const bool named = std::any_of(r.data.train.begin(), r.data.train.end(), [](const DataSource& s) { return !s.name.empty(); });
  if (named && r.data.train.front().weight == 0)
    rd.fail("data", "train", "named training sources need weights (shares of samples), e.g. { path = \"...\", weight = 0.3, name = \"web\" }");
  expand(r.data.train, r.data.train_files, "train");
  expand(r.data.val, r.data.val_files, "val");
  std::error_code ec;
  for (const std::string& v : r.data.val_files)
    for (const std::string& t : r.data.train_files)
      if (std::filesystem::equivalent(v, t, ec))
        r.warnings.push_back(rd.where("data", "val") + ": [data] val: " + v +
                             " is also a training shard: the validation loss will measure memorisation, not generalisation");
}

}  // namespace

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size, bool need_data) {
  toml::table root;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw RecipeError(path + ": is a directory; give a recipe file (e.g. configs/demo.toml)");
  if (const std::string why = not_regular_file(path); !why.empty()) throw RecipeError(path + ": " + why);
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
  // Every key in table order (a default may follow keys read before it);
  // a value the recipe gives must be of the key's type and in its range.
  for (const RecipeKey& k : recipe_keys()) {
    const toml::node* n = rd.node(k.section, k.name);
    KeyValue v = n ? rd.read(k, *n) : k.def(r, world_size);
    if (n) {
      if (const std::string why = k.check(v); !why.empty()) rd.fail(k.section, k.name, why);
    } else if (k.type == KeyType::Int && !k.is_auto(v)) {
      // A default computed from other keys that its field cannot hold (d_ff
      // = 4 * d_model past 32 bits): the message names those keys, which the
      // user did set. (Other defaults out of range are left to the rules
      // below, which say why in the recipe's terms.)
      const long i = std::get<long>(v);
      if (i > k.int_max || i < -k.int_max - 1)
        rd.fail(k.section, k.name, "not set, and its default " + k.default_text + " comes to " + std::to_string(i) +
                                       ", more than its field holds (at most " + std::to_string(k.int_max) +
                                       "); set " + k.full() + ", or change the keys its default comes from");
    }
    k.set(r, v);
  }
  check_rules(r, rd, world_size);
  for (const std::string& spec : r.fault_specs) {  // [fault]: test-only fault injection (engine/fault.h)
    try {
      for (Fault& f : parse_faults(spec, "")) r.faults.push_back(std::move(f));
    } catch (const RecipeError& e) {
      rd.fail("fault", "inject", std::string(e.what()).substr(2));  // drop parse_faults' empty "where: "
    }
  }
  if (need_data) check_data(r, rd);
  return r;
}

RunFacts read_run_facts(const std::string& path) {
  RunFacts f;
  if (!not_regular_file(path).empty()) return f;  // a FIFO would block the read: no facts
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
  static const std::set<std::string> skip_sections = {"checkpoint", "metrics", "supervisor", "launch", "fault"};
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
  std::ostringstream os;
  os << "# Resolved recipe (defaults filled in, overrides applied) from " << r.path << "\n";
  for (const std::string& sec : recipe_sections()) {
    std::string lines;
    for (const RecipeKey& k : recipe_keys())
      if (k.section == sec && (!k.shown || k.shown(r))) lines += k.name + " = " + toml_text(k, k.get(r)) + "\n";
    if (!lines.empty()) os << "\n[" << sec << "]\n" << lines;
  }
  return os.str();
}

}  // namespace trainer
