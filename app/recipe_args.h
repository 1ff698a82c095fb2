#pragma once
// One command-line parser for every subcommand that takes
// `RECIPE.toml [--set section.key=value ...]` (train, supervise, plan, bench).
// Overrides may be spelled --set K=V, --set=K=V, or torchtitan's
// --section.key V / --section.key=V for any recipe section. Each command
// names its own options: flags (no value) and valued options (one value);
// anything else is a usage error (exit 2) that names the command's usage.
#include <climits>
#include <map>
#include <string>
#include <vector>

namespace trainer {

struct RecipeArgs {
  std::string recipe;
  std::vector<std::string> overrides;          // "section.key=value"
  std::map<std::string, std::string> options;  // "--steps" -> "10"; a flag -> ""
  std::vector<std::string> after_dashes;       // what follows `--` (supervise's launch command)
  bool help = false;

  bool has(const std::string& opt) const { return options.count(opt) > 0; }
  // A valued option as a whole number in [lo, hi] (option_integer); def when absent.
  long integer(const std::string& opt, long def, long lo, long hi = INT_MAX) const;
  // A valued option as a finite number in [lo, hi] ((lo, hi] with lo_open); def when absent.
  double number(const std::string& opt, double def, double lo, double hi, bool lo_open = false) const;
  // A valued option's comma-separated items ("--profile a.json,b.json"); none when absent.
  std::vector<std::string> list(const std::string& opt) const;
};

struct RecipeArgsSpec {
  const char* command;                  // "train", for messages
  const char* usage;                    // printed with every usage error
  std::vector<std::string> flags;       // e.g. "--print-config"
  std::vector<std::string> valued;      // e.g. "--resume", "--steps"
  bool recipe_optional = false;         // (help-like flags need none either)
  bool dashes = false;                  // accepts `-- COMMAND...`
  std::vector<std::string> standalone = {};  // flags that need no recipe, e.g. "--keys"
};

RecipeArgs parse_recipe_args(const RecipeArgsSpec& spec, int argc, char** argv);

// The one reader of numbers on every command line: the whole text is a
// number in the range, else RecipeError (exit 2) naming the option, what it
// got and the range. Integers: decimal digits with an optional "-", never
// wrapped or saturated; numbers: finite (no inf, nan, hex or overflow).
long long option_integer(const std::string& opt, const std::string& text, long long lo, long long hi);
double option_number(const std::string& opt, const std::string& text, double lo, double hi, bool lo_open = false);

}  // namespace trainer
