#include "recipe/fault.h"

#include <cstdlib>
#include <sstream>

#include "runtime/errors.h"

namespace trainer {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\n"), b = s.find_last_not_of(" \t\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

long to_long(const std::string& v, const std::string& key, const std::string& item, const std::string& where) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || x < 0)
    throw RecipeError(where + ": fault \"" + item + "\": " + key + " must be a whole number >= 0, got \"" + v + "\"");
  return x;
}

Fault parse_one(const std::string& item, const std::string& where) {
  std::istringstream in(item);
  std::string kind, kv;
  in >> kind;
  Fault f;
  f.text = item;
  const char* usage =
      " (kinds: crash rank=R step=K | segv rank=R step=K | hang rank=R step=K | freeze rank=R step=K | slow rank=R ms=X [step=K] | nan step=K [rank=R] | "
      "nan_weight step=K [rank=R] | ckpt_kill point=P step=K | ckpt_hang rank=R step=K | bad_batch step=K | "
      "setup_stall rank=R ms=X | setup_fail rank=R point=P; each may add "
      "launch=N or launch=all)";
  if (kind == "crash") f.kind = Fault::Crash;
  else if (kind == "segv") f.kind = Fault::Segv;
  else if (kind == "hang") f.kind = Fault::Hang;
  else if (kind == "freeze") f.kind = Fault::Freeze;
  else if (kind == "slow") f.kind = Fault::Slow;
  else if (kind == "nan") f.kind = Fault::Nan;
  else if (kind == "nan_weight") f.kind = Fault::NanWeight;
  else if (kind == "ckpt_kill") f.kind = Fault::CkptKill;
  else if (kind == "ckpt_hang") f.kind = Fault::CkptHang;
  else if (kind == "bad_batch") f.kind = Fault::BadBatch;
  else if (kind == "setup_stall") f.kind = Fault::SetupStall;
  else if (kind == "setup_fail") f.kind = Fault::SetupFail;
  else throw RecipeError(where + ": unknown fault \"" + kind + "\" in \"" + item + "\"" + usage);
  bool has_rank = false, has_step = false, has_ms = false;
  while (in >> kv) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) throw RecipeError(where + ": fault \"" + item + "\": expected key=value, got \"" + kv + "\"" + usage);
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "rank") f.rank = (int)to_long(v, k, item, where), has_rank = true;
    else if (k == "step") f.step = to_long(v, k, item, where), has_step = true;
    else if (k == "ms") f.ms = (double)to_long(v, k, item, where), has_ms = true;
    else if (k == "point") f.point = v;
    else if (k == "launch") f.launch = v == "all" ? -1 : (int)to_long(v, k, item, where);
    else throw RecipeError(where + ": fault \"" + item + "\": unknown key \"" + k + "\"" + usage);
  }
  auto need = [&](bool ok, const char* what) {
    if (!ok) throw RecipeError(where + ": fault \"" + item + "\" needs " + what + usage);
  };
  switch (f.kind) {
    case Fault::Crash:
    case Fault::Segv:
    case Fault::Hang:
    case Fault::Freeze:
    case Fault::CkptHang: need(has_rank && has_step && f.step > 0, "rank=R and step=K (K >= 1)"); break;
    case Fault::Slow:
    case Fault::SetupStall: need(has_rank && has_ms, "rank=R and ms=X"); break;
    case Fault::Nan:
    case Fault::NanWeight:
    case Fault::BadBatch: need(has_step && f.step > 0, "step=K (K >= 1)"); break;
    case Fault::SetupFail: {
      std::string steps;
      bool known = false;
      for (const char* s : kSetupSteps) steps += (steps.empty() ? "" : "|") + std::string(s), known |= f.point == s;
      need(has_rank && known, ("rank=R and point=" + steps).c_str());
      break;
    }
    case Fault::CkptKill:
      need(f.point == "shards_written" || f.point == "manifest_written" || f.point == "renamed" ||
               f.point == "latest_written",
           "point=shards_written|manifest_written|renamed|latest_written");
      break;
  }
  return f;
}

}  // namespace

std::vector<Fault> parse_faults(const std::string& spec, const std::string& where) {
  std::vector<Fault> out;
  std::istringstream in(spec);
  std::string item;
  while (std::getline(in, item, ';'))
    if (!trim(item).empty()) out.push_back(parse_one(trim(item), where));
  return out;
}

FaultPlan::FaultPlan(std::vector<Fault> faults, int world_rank, int launch) {
  for (Fault& f : faults) {
    if (f.launch >= 0 && f.launch != launch) continue;
    if (f.kind != Fault::CkptKill && f.kind != Fault::BadBatch && f.rank != world_rank) continue;
    faults_.push_back(std::move(f));
  }
}

std::vector<const Fault*> FaultPlan::at(Fault::Kind kind, long step) const {
  std::vector<const Fault*> out;
  for (const Fault& f : faults_)
    if (f.kind == kind && (f.step == 0 || f.step == step)) out.push_back(&f);
  return out;
}

double FaultPlan::slow_ms(long step) const {
  double ms = 0;
  for (const Fault& f : faults_)
    if (f.kind == Fault::Slow && step >= f.step) ms += f.ms;
  return ms;
}

}  // namespace trainer
