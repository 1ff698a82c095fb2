// TOML -> Recipe. Every key is declared by the get() call that reads it, so
// unknown keys (typos) are found by comparing what the file has with what was
// read, and the nearest known name is suggested.
#include "app/recipe.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "data/dataset.h"
#include "model/param_registry.h"
#include "recipe/recipe_rules.h"
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
  // The keys the file and the overrides give, and the line of each.
  RecipeReader(toml::table& root, std::string file, std::set<std::string> overridden)
      : root_(root), file_(std::move(file)) {
    origin_.file = file_;
    origin_.overridden = std::move(overridden);
    const auto line_of = [&](const toml::node& n) {
      return n.source().begin.line > 0 ? file_ + ":" + std::to_string(n.source().begin.line) : std::string();
    };
    for (auto&& [sec, v] : root_) {
      if (!v.is_table()) continue;
      if (std::string l = line_of(v); !l.empty()) origin_.lines["[" + std::string(sec.str()) + "]"] = l;
      for (auto&& [key, n] : *v.as_table()) {
        const std::string full = std::string(sec.str()) + "." + std::string(key.str());
        origin_.given.insert(full);
        if (std::string l = line_of(n); !l.empty()) origin_.lines[full] = l;
      }
    }
  }
  const RecipeOrigin& origin() const { return origin_; }

  // Location of section.key for messages: "file:line" or "--set section.key".
  std::string where(const std::string& sec, const std::string& key) const { return origin_.where(sec, key); }

  [[noreturn]] void fail(const std::string& sec, const std::string& key, const std::string& msg) const {
    throw RecipeError(origin_.problem(sec, key, msg));
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
  RecipeOrigin origin_;
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

// [data] tokenizer: every source's files were made by one tokenizer (their
// data_info.json, read once per directory), the one data.tokenizer names
// when given; it becomes data.tokenizer, which the checkpoints keep.
void check_tokenizer(Recipe& r, RecipeReader& rd) {
  struct Made {
    std::string name, spec, where;
    int64_t vocab = 0;
  };
  std::optional<Made> first;
  std::map<std::string, std::optional<DataInfo>> by_dir;
  auto visit = [&](const std::vector<DataSource>& list, const char* key) {
    for (size_t i = 0; i < list.size(); i++)
      for (const std::string& f : list[i].files) {
        const std::string dir = std::filesystem::path(f).parent_path().string();
        if (!by_dir.count(dir)) by_dir[dir] = read_data_info(f);
        const std::optional<DataInfo>& info = by_dir[dir];
        if (!info) continue;  // no data_info.json: its ids are checked against the vocabulary alone
        const std::string where = std::string("data.") + key +
                                  (list[i].name.empty() ? "" : " source \"" + list[i].name + "\"") + " (" + f + ")";
        if (!first) {
          first = Made{info->tokenizer, info->spec, where, info->vocab_size};
        } else if (info->tokenizer != first->name || info->vocab_size != first->vocab) {
          throw DataError(rd.where("data", key) + ": " + where + " was made by tokenizer " + info->tokenizer + " (" +
                          std::to_string(info->vocab_size) + " ids), " + first->where + " by " + first->name + " (" +
                          std::to_string(first->vocab) + " ids): a model learns one tokenizer's ids; prepare every "
                          "source with the same `trainer data prepare --tokenizer`");
        }
      }
  };
  visit(r.data.train, "train");
  visit(r.data.val, "val");
  if (!first) return;
  if (r.origin.is_given("data", "tokenizer") && !r.data.tokenizer.empty() && !first->spec.empty() &&
      r.data.tokenizer != first->spec && r.data.tokenizer != first->name)
    rd.fail("data", "tokenizer", "\"" + r.data.tokenizer + "\", but " + first->where + " was made by " + first->name +
                                     " (\"" + first->spec + "\", its data_info.json): leave data.tokenizer out, or "
                                     "prepare the data with it");
  r.data.tokenizer = first->spec;  // "" from a data_info.json older than its tokenizer_spec: not known
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
  check_tokenizer(r, rd);
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
  r.origin = rd.origin();
  // Every key in table order (a default may follow keys read before it);
  // a value the recipe gives must be of the key's type and in its range.
  for (const RecipeKey& k : recipe_keys()) {
    if (const toml::node* n = rd.node(k.section, k.name)) {
      const KeyValue v = rd.read(k, *n);
      if (const std::string why = k.check(v); !why.empty()) rd.fail(k.section, k.name, why);
      k.set(r, v);
    } else if (const std::string why = apply_default(k, r, world_size); !why.empty()) {
      rd.fail(k.section, k.name, why);
    }
  }
  for (RecipeProblem& p : check_recipe(r, world_size)) {
    if (!p.warning) throw RecipeError(p.message);
    r.warnings.push_back(std::move(p.message));
  }
  for (const std::string& spec : r.fault_specs) {  // [fault]: test-only fault injection (recipe/fault.h)
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
  static const std::set<std::string> skip_sections = {"checkpoint", "metrics", "supervisor", "launch", "health", "fault"};
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
