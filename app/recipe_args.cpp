#include "app/recipe_args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "recipe/recipe_keys.h"
#include "runtime/units.h"
#include "runtime/errors.h"

namespace trainer {

namespace {
bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
// "--training.steps" names a recipe section: an override in torchtitan's spelling.
bool is_key_option(const std::string& opt) {
  const size_t dot = opt.find('.');
  return dot != std::string::npos && contains(recipe_sections(), opt.substr(2, dot - 2));
}
}  // namespace

long long option_integer(const std::string& opt, const std::string& text, long long lo, long long hi) {
  const std::string want = ": expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  const size_t digits = text.find_first_not_of("0123456789", text[0] == '-' ? 1 : 0);
  if (text.empty() || text == "-" || digits != std::string::npos)
    throw RecipeError(opt + " " + text + want);
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v < lo || v > hi) throw RecipeError(opt + " " + text + want);
  return v;
}

double option_number(const std::string& opt, const std::string& text, double lo, double hi, bool lo_open) {
  const std::string want = std::string(": expected a number in ") + (lo_open ? "(" : "[") + format_number(lo) + ", " +
                           format_number(hi) + "]";
  char* end = nullptr;
  errno = 0;
  const double v = text.find_first_not_of("0123456789.eE+-") == std::string::npos && !text.empty()
                       ? std::strtod(text.c_str(), &end)
                       : NAN;
  if (!end || *end || errno == ERANGE || !std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
    throw RecipeError(opt + " " + text + want);
  return v;
}

long RecipeArgs::integer(const std::string& opt, long def, long lo, long hi) const {
  const auto it = options.find(opt);
  return it == options.end() ? def : (long)option_integer(opt, it->second, lo, hi);
}

double RecipeArgs::number(const std::string& opt, double def, double lo, double hi, bool lo_open) const {
  const auto it = options.find(opt);
  return it == options.end() ? def : option_number(opt, it->second, lo, hi, lo_open);
}

std::vector<std::string> RecipeArgs::list(const std::string& opt) const {
  std::vector<std::string> items;
  const auto it = options.find(opt);
  if (it == options.end()) return items;
  size_t from = 0;
  for (size_t comma; (comma = it->second.find(',', from)) != std::string::npos; from = comma + 1)
    items.push_back(it->second.substr(from, comma - from));
  items.push_back(it->second.substr(from));
  for (const std::string& x : items)
    if (x.empty()) throw RecipeError(opt + " " + it->second + ": an empty item in the comma-separated list");
  return items;
}

RecipeArgs parse_recipe_args(const RecipeArgsSpec& spec, int argc, char** argv) {
  RecipeArgs a;
  const std::string cmd = spec.command;
  auto usage_error = [&](const std::string& msg) { throw RecipeError(cmd + ": " + msg + "\n" + spec.usage); };
  for (int i = 0; i < argc; i++) {
    const std::string s = argv[i];
    const size_t eq = s.find('=');
    const std::string opt = s.substr(0, eq);
    const bool inline_value = eq != std::string::npos && s.rfind("--", 0) == 0;
    auto value = [&]() -> std::string {
      if (inline_value) return s.substr(eq + 1);
      if (i + 1 >= argc) usage_error(opt + " needs a value");
      return argv[++i];
    };
    if (s == "--help" || s == "-h") {
      a.help = true;
    } else if (s == "--" && spec.dashes) {
      a.after_dashes.assign(argv + i + 1, argv + argc);
      break;
    } else if (opt == "--set") {
      a.overrides.push_back(value());
    } else if (s.rfind("--", 0) == 0 && is_key_option(opt)) {
      a.overrides.push_back(opt.substr(2) + "=" + value());
    } else if (contains(spec.valued, opt)) {
      a.options[opt] = value();
    } else if (contains(spec.flags, s)) {
      a.options[s] = "";
    } else if (!s.empty() && s[0] == '-') {
      usage_error("unknown option \"" + s + "\"" +
                  (s.find('.') != std::string::npos ? " (recipe keys are set with --set section.key=value)" : ""));
    } else if (a.recipe.empty()) {
      a.recipe = s;
    } else {
      usage_error("more than one recipe given (\"" + a.recipe + "\", \"" + s + "\")");
    }
  }
  const bool standalone =
      std::any_of(spec.standalone.begin(), spec.standalone.end(), [&](const std::string& f) { return a.has(f); });
  if (a.recipe.empty() && !a.help && !spec.recipe_optional && !standalone) usage_error("no recipe given");
  return a;
}

}  // namespace trainer
