#include "app/resume.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "ckpt/output_guard.h"
#include "ckpt/checkpoint.h"
#include "runtime/errors.h"
#include "runtime/utc_time.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {

std::string names(const std::vector<std::string>& steps) {
  std::string s;
  for (size_t i = 0; i < steps.size(); i++) {
    if (i == 4 && steps.size() > 6) {
      s += ", ... (" + std::to_string(steps.size() - 5) + " more)";
      i = steps.size() - 1;
    }
    s += (s.empty() ? "" : ", ") + fs::path(steps[i]).filename().string();
  }
  return s;
}

// Moves step directories (and `latest` when it names one of them) into
// dir/previous/<UTC time>/; returns that folder.
std::string move_aside(const std::string& dir, const std::vector<std::string>& steps) {
  const std::string stamp = utc_time("%Y%m%dT%H%M%SZ");
  std::string to = dir + "/previous/" + stamp;
  std::error_code ec;
  for (int k = 1; fs::exists(to, ec); k++) to = dir + "/previous/" + stamp + "_" + std::to_string(k);
  fs::create_directories(to, ec);
  if (ec) throw CheckpointError(to + ": cannot create: " + ec.message());
  const std::string latest = latest_checkpoint(dir);
  for (const std::string& s : steps) {
    fs::rename(s, to + "/" + fs::path(s).filename().string(), ec);
    if (ec) throw CheckpointError(s + ": cannot move to " + to + ": " + ec.message());
    if (!latest.empty() && fs::path(latest) == fs::path(s)) fs::rename(dir + "/latest", to + "/latest", ec);
  }
  return to;
}

// data.tokenizer: refused only against a checkpoint that records one (older
// ones record none, "(absent)" or "": accepted with the note), and only for
// another tokenizer: "gpt2" and "gpt2:/other/place/gpt2.tiktoken" are one.
bool refused_key(const RecipeChange& c, const Recipe& now) {
  if (c.key == "data.tokenizer") {
    // The TOML text of the spec ("\"gpt2:/x/gpt2.tiktoken\""): its family, before any ':'.
    auto family = [](std::string text) {
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
      return text.substr(0, text.find(':'));
    };
    return c.was != "\"\"" && c.was != "(absent)" && family(c.was) != family(c.now);
  }
  // The experts' shape is the model's; the losses' coefficients, the
  // capacity and bias_rate's value (not whether the routers have a bias)
  // may change. A checkpoint older than [moe] (its keys absent) is of a
  // dense model: resumed as one, nothing changed; one older than a key of
  // [moe] is at that key's default (0: off).
  const auto nonzero = [](const std::string& v) { return v != "(absent)" && std::strtod(v.c_str(), nullptr) != 0; };
  const bool training_only = c.key == "moe.aux_coeff" || c.key == "moe.z_coeff" || c.key == "moe.capacity_factor" ||
                             (c.key == "moe.bias_rate" && nonzero(c.was) && nonzero(c.now));
  const bool absent_default = c.was == "(absent)" && (!now.model.moe.enabled() || !nonzero(c.now));
  const bool moe_shape = c.key.rfind("moe.", 0) == 0 && !training_only && !absent_default;
  return c.key.rfind("model.", 0) == 0 || moe_shape || c.key == "run.seed" || c.key == "data.train";
}

bool allowed(const std::string& key, const std::vector<std::string>& allow) {
  for (const std::string& a : allow) {
    if (a == key || a == "all") return true;
    if (a.size() > 2 && a.substr(a.size() - 2) == ".*" && key.rfind(a.substr(0, a.size() - 1), 0) == 0) return true;
  }
  return false;
}

// Compares the checkpoint's recorded recipe with this run's.
void compare_recipes(const std::string& from, const Recipe& r, ResumeDecision& d) {
  const std::string text = checkpoint_recipe(from);
  if (text.empty()) {
    d.notes.push_back("note: " + from + " records no recipe; the recipe was not compared");
    return;
  }
  std::string refused, accepted;
  for (const RecipeChange& c : recipe_changes(text, r)) {
    const std::string line = c.key + " " + c.was + " -> " + c.now;
    if (refused_key(c, r) && !allowed(c.key, r.checkpoint.allow_changes)) refused += "\n  " + line;
    else accepted += (accepted.empty() ? "" : "; ") + line;
  }
  if (!refused.empty())
    throw RecipeError("cannot resume from " + from + ": the recipe differs from the checkpoint's in what the "
                      "run means (model shape, seed or training data):" + refused +
                      "\nResume with the checkpoint's values (its recipe is " + from + "/recipe.toml), train "
                      "a new run with another [checkpoint] dir, or accept the change explicitly with "
                      "--set checkpoint.allow_changes='[\"KEY\", ...]'.");
  if (!accepted.empty()) d.notes.push_back("note: resuming with recipe changes: " + accepted);
}

}  // namespace

namespace {
void ensure_writable_dir(const std::string& dir, const char* key) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw RecipeError(dir + ": cannot create (" + key + "): " + ec.message());
  const std::string probe = dir + "/.write_test";
  FILE* f = std::fopen(probe.c_str(), "w");
  if (!f) throw RecipeError(dir + ": not writable (" + key + "): " + std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
}
}  // namespace

void ensure_run_dirs(const Recipe& r) {
  check_outside_steps(r.run.dir, "[run] dir");
  if (r.checkpoint.saves()) check_outside_steps(r.checkpoint.dir, "[checkpoint] dir");
  if (r.metrics.tensorboard) check_outside_steps(r.metrics.tensorboard_dir, "[metrics] tensorboard_dir");
  ensure_writable_dir(r.run.dir, "[run] dir");
  if (r.checkpoint.saves()) ensure_writable_dir(r.checkpoint.dir, "[checkpoint] dir");
}

void lock_run_dirs(const Recipe& r, RunDirLocks& locks, const std::string& token) {
  if (std::string e = locks.run.acquire(r.run.dir, token); !e.empty()) throw RecipeError(e);
  std::error_code ec;
  const std::string& ck = r.checkpoint.dir;
  if (fs::is_directory(ck, ec) && !fs::equivalent(ck, r.run.dir, ec))
    if (std::string e = locks.ckpt.acquire(ck, locks.run.token()); !e.empty()) throw RecipeError(e);
  for (const RunLock* l : {&locks.run, &locks.ckpt})
    if (!l->warning().empty()) std::fprintf(stderr, "warning: %s\n", l->warning().c_str());
}

ResumeDecision decide_resume(const Recipe& r, bool start_over) {
  const CheckpointSection& ck = r.checkpoint;
  ResumeDecision d;
  // Saves that never committed (the job was killed mid-save): never a
  // checkpoint, only disk space; the lock says no other run is writing them.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ck.dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".tmp" && e.is_directory(ec)) {
      fs::remove_all(e.path(), ec);
      d.notes.push_back("note: removed " + e.path().string() + ", a save that was interrupted before it committed");
    }
  }
  const std::vector<std::string> existing = committed_checkpoints(ck.dir);
  std::vector<std::string> foreign;  // what this run would overwrite or delete
  if (start_over && ck.resume != "auto" && ck.resume != "none")
    throw RecipeError("--start-over trains from step 0 and cannot be combined with resuming from " + ck.resume +
                      "; use one or the other");
  if (start_over) {
    foreign = existing;
  } else if (ck.resume == "none") {
    foreign = existing;
  } else if (ck.resume == "auto") {
    std::string failures;
    std::vector<std::string> broken;
    d.from = newest_valid_checkpoint(ck.dir, &broken, &failures);
    if (d.from.empty() && !existing.empty())
      throw CheckpointError(ck.dir + " holds " + std::to_string(existing.size()) +
                            " checkpoint(s) and none verifies; nothing was trained:" + failures +
                            "\nRestore or repair one (trainer ckpt verify PATH), resume from one explicitly "
                            "(--resume PATH), or train from step 0 with `trainer train --start-over` (which "
                            "moves them to " + ck.dir + "/previous/, deleting nothing).");
    if (!broken.empty()) {
      // Newer than the one resumed and unreadable: kept, out of the way.
      const std::string to = move_aside(ck.dir, broken);
      d.notes.push_back("warning: newer checkpoint(s) did not verify and were moved to " + to + ":" + failures);
    }
  } else {
    d.from = find_checkpoint(ck.resume);
    read_manifest(d.from, true);
    const bool same_dir = fs::equivalent(fs::path(d.from).parent_path(), ck.dir, ec);
    for (const std::string& s : existing)
      if (!same_dir || checkpoint_step(s) > checkpoint_step(d.from)) foreign.push_back(s);
  }
  if (!foreign.empty() && !start_over) {
    const std::string what = ck.resume == "none" ? "training from step 0 (resume = \"none\")"
                                                 : "resuming from " + d.from;
    throw RecipeError("[checkpoint] dir " + ck.dir + " holds checkpoints this run did not write (" +
                      names(foreign) + "); " + what + " would overwrite or delete them. Give this run "
                      "another [checkpoint] dir (or [run] dir), resume them with resume = \"auto\", or start "
                      "over with `trainer train --start-over`, which moves them to " + ck.dir +
                      "/previous/ (nothing is deleted).");
  }
  if (!foreign.empty())
    d.notes.push_back("start over: moved " + names(foreign) + " to " + move_aside(ck.dir, foreign));
  if (!d.from.empty()) compare_recipes(d.from, r, d);
  return d;
}

}  // namespace trainer
