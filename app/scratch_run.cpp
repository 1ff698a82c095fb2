#include "app/scratch_run.h"

#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "app/recipe.h"
#include "data/shard_writer.h"
#include "engine/job.h"
#include "runtime/errors.h"
#include "runtime/rng.h"
#include "parallel/mpi_world.h"

namespace trainer {

namespace {

// Random tokens for every sample the steps read, as one llm.c shard.
std::string write_synthetic_data(const Recipe& r, const std::string& dir, long steps) {
  const size_t n = (size_t)(steps + 1) * r.training.global_batch * (r.model.seq_len + 1) + 1;
  std::vector<uint32_t> tokens(n);
  Rng rng(r.run.seed, "smoke");
  for (uint32_t& t : tokens) t = (uint32_t)rng.below(r.model.vocab_size);
  for (const std::string& path : write_shard(ShardFormat::Llmc, dir + "/synthetic", tokens.data(), n, {n},
                                             (uint32_t)r.model.vocab_size))
    std::filesystem::rename(path + ".new", path);
  return dir + "/synthetic.bin";
}

// Rank 0 decides: the scratch directory, and whether the data is synthetic.
Scratch make_scratch(const std::string& recipe, const std::vector<std::string>& overrides, bool synthetic, int size,
                     long steps) {
  Scratch s;
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/trainer-smoke-XXXXXX";
  if (!mkdtemp(templ.data())) throw UserError(kExitUsage, "cannot make a scratch directory " + templ + " ($TMPDIR)");
  s.dir = templ;
  if (!synthetic) {
    try {
      load_recipe(recipe, overrides, size, true);
    } catch (const DataError& e) {
      synthetic = true;
      s.note = std::string("the recipe's data cannot be read (") + e.what() + "): random tokens instead";
    }
  }
  if (synthetic) s.data = write_synthetic_data(load_recipe(recipe, overrides, size, false), s.dir, steps);
  return s;
}

}  // namespace

int shared_scratch(const std::string& recipe, const std::vector<std::string>& overrides, bool synthetic, int rank,
                   int size, long steps, Scratch& out) {
  int code = 0;
  if (rank == 0) {
    try {
      out = make_scratch(recipe, overrides, synthetic, size, steps);
    } catch (const UserError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      code = e.exit_code;
    }
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (code) return code;
  out.dir = broadcast_string(out.dir), out.data = broadcast_string(out.data);
  return 0;
}

std::vector<std::string> train_args(const std::string& recipe, const std::vector<std::string>& overrides,
                                    const Scratch& s, long steps) {
  std::vector<std::string> a = {recipe};
  auto set = [&](const std::string& kv) { a.push_back("--set"), a.push_back(kv); };
  for (const std::string& o : overrides) set(o);
  set("run.dir=\"" + s.dir + "/run\"");
  set("checkpoint.dir=\"" + s.dir + "/checkpoints\"");
  set("checkpoint.every=0");
  set("checkpoint.resume=\"none\"");
  set("training.steps=" + std::to_string(steps));
  set("training.exit_after=0");
  set("training.log_every=1");
  set("training.eval_every=0");
  set("data.val=[]");
  set("metrics.tensorboard=false");
  if (!s.data.empty()) set("data.train=[\"" + s.data + "\"]");
  return a;
}

int run_inside(const std::vector<std::string>& a, int rank, int size) {
  std::vector<char*> argv;
  for (const std::string& s : a) argv.push_back(const_cast<char*>(s.c_str()));
  return train_job((int)argv.size(), argv.data(), rank, size);
}

}  // namespace trainer
