// Recipe errors: each ends every rank of `mpirun -np 2 trainer train` with
// exit code 2 (data errors: 3) and a single message naming file, line and key,
// before training starts; ATypedEditIsTheFileWithItsSetLines compares, in process,
// a typed --set edit with the file read again. The key table: tests/unit/recipe/.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <cmath>
#include <string>

#include "app/recipe.h"
#include "recipe/recipe_keys.h"
#include "recipe/recipe_rules.h"
#include "data/token_shard.h"
#include "runtime/errors.h"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  int code;
  std::string out;
};

Outcome run(const std::string& cmd) {
  Outcome o{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, n);
  const int st = pclose(p);
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return o;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) n++;
  return n;
}

class RecipeErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // mpirun as root (containers, CI) and more ranks than cores; a user's own
    // settings win.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    char tmpl[] = "/tmp/trainer_recipe_XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::vector<uint32_t> t(4000);
    for (size_t i = 0; i < t.size(); i++) t[i] = "the quick brown fox "[i % 20];
    write_token_shard(dir_ + "/train.bin", t);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // A valid recipe; edits replace whole lines ("key = value").
  std::string base() const {
    return "[run]\nname = \"t\"\ndir = \"" + dir_ + "/run\"\n"
           "[model]\narch = \"gpt2\"\nvocab_size = 256\nd_model = 32\nn_layers = 1\n"
           "n_heads = 4\nd_ff = 64\nseq_len = 16\n"
           "[data]\ntrain = [\"" + dir_ + "/train.bin\"]\n"
           "[training]\nsteps = 2\nglobal_batch = 4\nmicro_batch = 1\n"
           "[optimizer]\nlr = 1e-3\n";
  }
  std::string write(const std::string& text) const {
    const std::string p = dir_ + "/recipe.toml";
    std::ofstream(p) << text;
    return p;
  }
  static std::string edit(std::string text, const std::string& from, const std::string& to) {
    const size_t p = text.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    return text.replace(p, from.size(), to);
  }
  Outcome train(const std::string& recipe, const std::string& extra = "", int np = 2) const {
    return run(std::string(MPIEXEC) + " -np " + std::to_string(np) + " " + TRAINER_BIN +
               " train " + recipe + " " + extra);
  }
  // Exit code, one message in total, and that it contains each fragment.
  void expect_error(const Outcome& o, int code, std::initializer_list<std::string> parts) const {
    EXPECT_EQ(o.code, code) << o.out;
    EXPECT_EQ(count(o.out, "error:"), 1) << o.out;
    for (const auto& p : parts) EXPECT_NE(o.out.find(p), std::string::npos) << "missing \"" << p << "\" in:\n" << o.out;
    EXPECT_EQ(o.out.find("step "), std::string::npos) << "training must not start:\n" << o.out;
  }
  static std::string dir_;
};
std::string RecipeErrors::dir_;

}  // namespace

TEST_F(RecipeErrors, BaseRecipeTrains) {
  const Outcome o = train(write(base()));
  EXPECT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("done: 2 steps"), std::string::npos) << o.out;
}

// A peak below what the run computes (a stale cache, a wrong
// runtime.peak_gflops) never gives an MFU above 100%: the run says the peak
// is stale once and measures MFU against its own rate from then on.
TEST_F(RecipeErrors, AStalePeakNeverGivesAnMfuAbove100Percent) {
  const std::string run = dir_ + "/stale_peak";
  const Outcome o = train(write(base()), "--set runtime.peak_gflops=0.001 --set run.dir='\"" + run + "\"'" +
                                             " --set training.log_every=1");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(count(o.out, "that peak is stale"), 1) << o.out;
  std::ifstream in(run + "/metrics.jsonl");
  int records = 0;
  for (std::string l; std::getline(in, l);) {
    const size_t at = l.find("\"mfu\": ");
    if (at == std::string::npos) continue;
    records++;
    EXPECT_LE(std::stod(l.substr(at + 7)), 1.0) << l;
  }
  EXPECT_EQ(records, 2);
}

// An evaluation that reads more windows than the validation set holds wraps
// around: it says so once, with the figures, and metrics.jsonl says how many
// distinct windows were used.
TEST_F(RecipeErrors, AnEvaluationThatWrapsSaysSoOnce) {
  const std::string run = dir_ + "/eval_wrap";
  const Outcome o = train(write(base()), "--set 'data.val=[\"" + dir_ + "/train.bin\"]' --set training.steps=3 "
                                         "--set training.eval_every=1 --set training.eval_batches=200 "
                                         "--set run.dir='\"" + run + "\"'");
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ(count(o.out, "are counted twice or more"), 1) << o.out;
  const size_t windows = (4000 - 1) / 16;  // the shard's windows of seq_len + 1 tokens, shifted by seq_len
  EXPECT_NE(o.out.find("holds " + std::to_string(windows) + " windows"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("= 400 are read"), std::string::npos) << o.out;  // 200 x micro-batch 1 x dp 2
  std::ifstream in(run + "/metrics.jsonl");
  int evals = 0;
  for (std::string l; std::getline(in, l);)
    if (l.find("\"val_loss\"") != std::string::npos) {
      evals++;
      EXPECT_NE(l.find("\"val_windows\": " + std::to_string(windows)), std::string::npos) << l;
    }
  EXPECT_EQ(evals, 3);
}

// Sizes past what one tensor or one schedule can hold are refused from the
// recipe (exit 2, naming the key), before anything is built; a size that is
// merely too large for memory is refused by the memory check, whose advice
// never tries a step of more than 2^20 micro-batches (it used to build that
// schedule: std::bad_alloc, exit 1).
TEST_F(RecipeErrors, HugeBatchesAreRefusedNotAllocated) {
  const std::string p = write(base());
  expect_error(train(p, "--set training.micro_batch=1000000000 --set training.global_batch=2000000000"), 2,
               {"[training] micro_batch", "16000000000 tokens in one micro-batch"});
  expect_error(train(p, "--set training.micro_batch=1 --set training.global_batch=2000000000"), 2,
               {"[training] global_batch", "1000000000 micro-batches per step", "more than 1048576"});
  const Outcome plan = run(std::string(TRAINER_BIN) + " plan " + p +
                           " --ranks 2 --set training.micro_batch=2147483647 --set training.global_batch=2147483647");
  EXPECT_EQ(plan.code, 2) << plan.out;
  EXPECT_EQ(plan.out.find("internal error"), std::string::npos) << plan.out;
  const Outcome big = train(p, "--set training.micro_batch=60000000 --set training.global_batch=120000000");
  expect_error(big, 2, {"needs", "per rank", "Try:"});
  EXPECT_EQ(big.out.find("training.micro_batch = 1 "), std::string::npos) << big.out;
  // Sequences too long for one rank's activations: context parallelism is one of the ways out.
  expect_error(train(p, "--set model.seq_len=67108864 --set training.micro_batch=1 --set training.global_batch=2"), 2,
               {"needs", "Try:", "parallel.cp = 2 (each sequence cut over twice the ranks"});
}

// A validation shard too short for one window is named as data.val, not
// taken for the training data.
TEST_F(RecipeErrors, AShortValidationShardIsNamedAsSuch) {
  const std::string val = dir_ + "/short_val.bin";
  write_token_shard(val, std::vector<uint32_t>(10, 65));
  const Outcome o = train(write(base()), "--set 'data.val=[\"" + val + "\"]'");
  expect_error(o, 3, {"data.val: " + val, "fewer than seq_len+1 = 17 tokens"});
  EXPECT_EQ(o.out.find("training sample"), std::string::npos) << o.out;
}

TEST_F(RecipeErrors, UnknownKeySuggestsNearest) {
  const std::string p = write(edit(base(), "steps = 2", "stpes = 2"));
  expect_error(train(p), 2, {p + ":15:", "[training] stpes", "unknown key", "did you mean \"steps\""});
}

TEST_F(RecipeErrors, UnknownSectionSuggestsNearest) {
  const std::string p = write(base() + "[optimiser]\nlr = 1\n");
  expect_error(train(p), 2, {p + ":20:", "unknown section [optimiser]", "did you mean [optimizer]"});
}

TEST_F(RecipeErrors, WrongType) {
  const std::string p = write(edit(base(), "d_model = 32", "d_model = \"32\""));
  expect_error(train(p), 2, {p + ":7:", "[model] d_model", "expected an integer, got a string"});
}

TEST_F(RecipeErrors, InvalidChoiceSuggestsNearest) {
  const std::string p = write(edit(base(), "arch = \"gpt2\"", "arch = \"gtp2\""));
  expect_error(train(p), 2, {p + ":5:", "[model] arch", "\"gtp2\" is not one of", "did you mean \"gpt2\""});
}

TEST_F(RecipeErrors, GlobalBatchNotDivisible) {
  const std::string p = write(edit(base(), "global_batch = 4", "global_batch = 5"));
  expect_error(train(p), 2, {p + ":16:", "[training] global_batch", "5 is not divisible by micro_batch * dp = 1 * 2 = 2"});
}

TEST_F(RecipeErrors, HeadsMustDivideModelWidth) {
  const std::string p = write(edit(base(), "n_heads = 4", "n_heads = 5"));
  expect_error(train(p), 2, {p + ":9:", "[model] n_heads", "must divide d_model = 32"});
}

TEST_F(RecipeErrors, KvHeadsMustDivideHeads) {
  std::string t = edit(base(), "arch = \"gpt2\"", "arch = \"llama\"");
  const std::string p = write(edit(t, "n_heads = 4", "n_heads = 4\nn_kv_heads = 3"));
  expect_error(train(p), 2, {p + ":10:", "[model] n_kv_heads", "divide n_heads = 4"});
}

TEST_F(RecipeErrors, MissingDataFile) {
  const std::string p = write(edit(base(), dir_ + "/train.bin", dir_ + "/nope_*.bin"));
  expect_error(train(p), 3, {p + ":13:", "[data] train", dir_ + "/nope_*.bin", "no such file"});
}

TEST_F(RecipeErrors, LayoutDoesNotMatchWorld) {
  const std::string p = write(base() + "[parallel]\ndp = 3\n");
  expect_error(train(p), 2, {p + ":21:", "[parallel] dp", "dp * pp * cp * tp = 3 * 1 * 1 * 1 = 3", "2 ranks"});
  // dp left to the launch: too few ranks for one model copy says how to launch.
  const std::string q = write(base() + "[parallel]\npp = 4\n");
  expect_error(train(q), 2, {q + ":21:", "[parallel] pp", "pp * cp * tp = 4 ranks hold one model copy", "launched with 2",
                             "mpirun -np 4"});
}

TEST_F(RecipeErrors, TensorParallelNeedsDivisibleShapes) {
  expect_error(train(write(base()), "--set parallel.tp=2 --set model.d_ff=65"), 2,
               {"[model] d_ff", "d_ff = 65 must be divisible by parallel.tp = 2"});
  expect_error(train(write(base()), "--set parallel.tp=2 --set model.vocab_size=255"), 2,
               {"[model] vocab_size", "divisible by parallel.tp = 2", "50304"});
  expect_error(train(write(base()), "--set parallel.tp=2 --set model.seq_len=15 --set parallel.sequence_parallel=true"), 2,
               {"[parallel] sequence_parallel", "seq_len = 15 divisible by tp = 2"});
}

// Context parallelism cuts each sequence into 2 x cp chunks; its ranks hold
// one model copy with tp and pp.
TEST_F(RecipeErrors, ContextParallelNeedsEqualChunks) {
  expect_error(train(write(base()), "--set parallel.cp=2 --set model.seq_len=14"), 2,
               {"[parallel] cp", "2 * cp = 4 equal chunks", "model.seq_len = 14 must divide by 4"});
  expect_error(train(write(base()), "--set parallel.cp=4 --set model.seq_len=16"), 2,
               {"[parallel] cp", "pp * cp * tp = 4 ranks hold one model copy", "launched with 2"});
}

// The all-to-all gives each cp x tp rank whole heads: kv heads too (GQA).
TEST_F(RecipeErrors, AllToAllContextParallelNeedsHeadsDivisibleByCpTimesTp) {
  std::string t = edit(base(), "arch = \"gpt2\"", "arch = \"llama\"");
  const std::string llama = edit(t, "n_heads = 4", "n_heads = 4\nn_kv_heads = 1");
  expect_error(train(write(llama), "--set parallel.cp=2 --set parallel.cp_comm=a2a"), 2,
               {"[parallel] cp_comm", "cp * tp = 2 * 1 = 2", "model.n_heads = 4", "kv heads (n_kv_heads) = 1",
                "must both divide by 2", "cp_comm = \"ring\""});
  // Too long for memory at a2a cp 2: doubling cp is suggested with the ring,
  // as 2 kv heads do not divide over cp 4.
  const std::string two_kv = edit(t, "n_heads = 4", "n_heads = 4\nn_kv_heads = 2");
  expect_error(train(write(two_kv), "--set parallel.cp=2 --set parallel.cp_comm=a2a --set model.seq_len=67108864 "
                                    "--set training.micro_batch=1 --set training.global_batch=2"),
               2, {"needs", "Try:", "parallel.cp = 4 with cp_comm = \"ring\" (each sequence cut over twice"});
}

// Where `supervise` runs the job (supervise/allocation.h): refused before
// anything is launched.
TEST_F(RecipeErrors, TheAllocationIsCheckedBeforeALaunch) {
  const auto supervise = [&](const std::string& extra) {
    return run("env -u SLURM_JOB_NODELIST " + std::string(TRAINER_BIN) + " supervise " + write(base()) + " " + extra);
  };
  expect_error(supervise("--set launch.nodes=2 --set launch.ranks=2"), 2,
               {"[launch] nodes = 2 picks hosts from an allocation, and there is none", "launch.hosts",
                "sbatch -N 4"});
  expect_error(supervise("--set 'launch.hosts=[\"a\", \"b\"]' --set launch.hostfile=hosts.txt"), 2,
               {"[launch] hostfile", "launch.hosts or launch.hostfile, not both"});
  expect_error(supervise("--set 'launch.hosts=[\"a\", \"b\"]' --set launch.nodes=3 --set launch.ranks=6"), 2,
               {"[launch] nodes", "3 is more than the 2 host(s) launch.hosts lists"});
  expect_error(supervise("--set 'launch.hosts=[\"a\", \"b\"]' --set launch.nodes=2 --set launch.ranks=3"), 2,
               {"[launch] nodes", "2 does not divide the job's 3 ranks"});
  expect_error(supervise("--set launch.hostfile=" + dir_ + "/no_such_hostfile"), 2,
               {"[launch] hostfile: cannot read", "no_such_hostfile"});
  expect_error(supervise("--set 'launch.hosts=[\"a\", \"a\"]'"), 2, {"[launch]", "lists host a twice"});
  expect_error(supervise("--set 'launch.hosts=[\"a\", \"b\", \"c\"]' --set launch.ranks=4"), 2,
               {"[launch]", "4 ranks do not split evenly over the 3 hosts"});
  expect_error(supervise("--set 'launch.hosts=[\"a\"]' -- true"), 2,
               {"a launch command given after `--`"});
}

TEST_F(RecipeErrors, PipelineNeedsDivisibleLayersAndMicroBatches) {
  expect_error(train(write(base()), "--set parallel.pp=2 --set model.n_layers=3"), 2,
               {"[parallel] pp", "n_layers = 3 must be divisible by pp * virtual_stages = 2 * 1"});
  expect_error(train(write(base()), "--set parallel.pp=2 --set model.n_layers=4 --set parallel.schedule=interleaved --set training.global_batch=5"), 2,
               {"[training] global_batch", "multiple of pp = 2"});
  expect_error(train(write(base()), "--set parallel.pp=2 --set model.n_layers=4 --set parallel.virtual_stages=2"), 2,
               {"[parallel] virtual_stages", "one chunk per stage"});
  expect_error(train(write(base()), "--set parallel.pp=2 --set parallel.schedule=gpipe"), 2,
               {"[parallel] schedule", "\"gpipe\" is not one of \"1f1b\", \"interleaved\""});
}

TEST_F(RecipeErrors, RecomputeKeysAreChecked) {
  expect_error(train(write(base()), "--set recompute.mode=selectiv"), 2,
               {"--set recompute.mode", "\"selectiv\" is not one of", "did you mean \"selective\""});
  expect_error(train(write(base()), "--set recompute.layers=0"), 2,
               {"[recompute] layers", "positive number of layers"});
}

TEST_F(RecipeErrors, SupervisionKeysAreChecked) {
  expect_error(train(write(base()), "--set training.on_nan=ignore"), 2,
               {"--set training.on_nan", "\"ignore\" is not one of \"stop\", \"skip\", \"rollback\""});
  expect_error(train(write(base()), "--set runtime.straggler_factor=0.5"), 2,
               {"[runtime] straggler_factor", "must be > 1"});
  expect_error(train(write(base()), "--set runtime.comm_timeout=-1"), 2, {"[runtime] comm_timeout", ">= 0"});
  expect_error(train(write(base()), "--set supervisor.backoff_max=1 --set supervisor.backoff=2"), 2,
               {"[supervisor] backoff_max", "must be >= supervisor.backoff"});
  expect_error(train(write(base()), "--set supervisor.on_straggler=replace --set runtime.straggler_factor=0"), 2,
               {"[supervisor] on_straggler", "runtime.straggler_factor = 0 turns off"});
  expect_error(train(write(base()), "--set supervisor.on_straggler=swap"), 2,
               {"--set supervisor.on_straggler", "\"swap\" is not one of \"report\", \"replace\""});
  expect_error(train(write(base()), "--set supervisor.straggler_windows=0"), 2,
               {"[supervisor] straggler_windows", ">= 1"});
  expect_error(train(write(base()), "--set supervisor.spare_wait=-1"), 2, {"[supervisor] spare_wait", ">= 0"});
  expect_error(train(write(base()), "--set supervisor.spare_check_every=0"), 2,
               {"[supervisor] spare_check_every", "must be > 0"});
  expect_error(train(write(base()), "--set launch.launcher=slurm"), 2,
               {"--set launch.launcher", "\"slurm\" is not one of \"mpirun\", \"srun\""});
  expect_error(train(write(base()), "--set 'fault.inject=[\"hang rank=1\"]'"), 2,
               {"[fault] inject", "fault \"hang rank=1\" needs rank=R and step=K"});
  expect_error(train(write(base()), "--set training.spike_factor=0.8"), 2, {"[training] spike_factor", "must be > 1"});
  expect_error(train(write(base()), "--set training.spike_window=2"), 2, {"[training] spike_window", ">= 5"});
  expect_error(train(write(base()), "--set training.on_spike=warn"), 2,
               {"--set training.on_spike", "\"warn\" is not one of \"stop\", \"skip\", \"rollback\""});
}

TEST_F(RecipeErrors, PlanPrintsEveryModeWithoutMpi) {
  const Outcome o = run(std::string(TRAINER_BIN) + " plan " + write(base()) + " --ranks 2 --set parallel.pp=1");
  EXPECT_EQ(o.code, 0) << o.out;
  for (const char* mode : {"none*", "selective", "full"}) EXPECT_NE(o.out.find(mode), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("dp 2 x pp 1 x tp 1"), std::string::npos) << o.out;
}

// runtime.backend = "cuda" without a usable GPU (or in a build without the
// CUDA backend): one line saying why, exit 2, on every rank, before training;
// `trainer plan` compares with the GPU's memory and says there is none here.
TEST_F(RecipeErrors, CudaWithoutAGpuStopsWithTheReason) {
  const Outcome probe = run(std::string(TRAINER_BIN) + " --version");
  const std::string p = write(base());
  const Outcome o = train(p, "--set runtime.backend=cuda --set parallel.pp=1");
  if (o.code == 0) GTEST_SKIP() << "a GPU is usable here";
  expect_error(o, 2, {"runtime.backend = \"cuda\" but"});
  const Outcome plan = run(std::string(TRAINER_BIN) + " plan " + p + " --ranks 2 --set parallel.pp=1 --set runtime.backend=cuda");
  EXPECT_EQ(plan.code, 0) << plan.out;
  EXPECT_NE(plan.out.find("of GPU memory per rank"), std::string::npos) << plan.out;
  EXPECT_NE(probe.out.find("backends: cpu"), std::string::npos) << probe.out;
}

TEST_F(RecipeErrors, EvalNeedsValidationData) {
  const std::string p = write(edit(base(), "micro_batch = 1", "micro_batch = 1\neval_every = 5"));
  expect_error(train(p), 2, {p + ":18:", "[training] eval_every", "needs validation data"});
}

TEST_F(RecipeErrors, InvalidToml) {
  const std::string p = write(edit(base(), "lr = 1e-3", "lr = = 1e-3"));
  expect_error(train(p), 2, {p + ":19:", "invalid TOML"});
}

TEST_F(RecipeErrors, OverrideTypoIsNamed) {
  expect_error(train(write(base()), "--set model.d_modle=64"), 2,
               {"--set model.d_modle", "unknown key", "did you mean \"d_model\""});
}

TEST_F(RecipeErrors, OverrideValueIsChecked) {
  expect_error(train(write(base()), "--set training.micro_batch=0"), 2,
               {"--set training.micro_batch", "must be >= 1"});
}

// A float field holds its value in fp32: a number in range as a double but
// not once rounded (an AdamW beta that becomes 1 wrote NaN into every weight
// at step 1; an eps that becomes 0; a learning rate that becomes inf) is
// refused naming the key and what the value becomes.
TEST_F(RecipeErrors, ANumberOutOfRangeInFp32IsRefused) {
  const std::string p = write(base());
  expect_error(train(p, "--set optimizer.beta2=0.99999999"), 2,
               {"--set optimizer.beta2", "must be in [0, 1) in fp32", "0.99999999 is 1 there"});
  expect_error(train(p, "--set optimizer.beta1=0.99999999999"), 2, {"optimizer.beta1", "is 1 there"});
  expect_error(train(p, "--set optimizer.eps=1e-50"), 2, {"optimizer.eps", "must be > 0 in fp32", "is 0 there"});
  expect_error(train(p, "--set optimizer.lr=1e39"), 2, {"optimizer.lr", "is inf there"});
  expect_error(train(p, "--set training.grad_clip=1e300"), 2, {"training.grad_clip", "is inf there"});
  // Doubles and the largest beta that stays below 1 in fp32 are untouched.
  EXPECT_EQ(train(p, "--set optimizer.beta2=0.9999999 --set training.steps=1").code, 0);
}

// A default computed from other keys that leaves its range (d_ff = 4 *
// d_model past 32 bits) is refused naming the key as not set and the
// default's formula, so the user looks at d_model, which they did set.
TEST_F(RecipeErrors, ADefaultOutOfRangeNamesWhatItComesFrom) {
  const std::string p = write(edit(base(), "d_ff = 64\n", ""));
  expect_error(train(p, "--set model.d_model=1073741824 --set model.n_heads=1"), 2,
               {"[model] d_ff: not set, and its default 4 * d_model comes to 4294967296", "at most 2147483647",
                "set model.d_ff, or change the keys its default comes from"});
}

// model.rope_scaling: types the trainer does not implement, unknown or
// missing fields and out-of-range values are refused by name; gpt2 has no RoPE.
TEST_F(RecipeErrors, RopeScalingIsChecked) {
  const std::string p = write(edit(base(), "arch = \"gpt2\"", "arch = \"llama\""));
  const std::string l3 = "rope_type=\"llama3\",factor=8.0,low_freq_factor=1.0,high_freq_factor=4.0";
  expect_error(train(p, "--set 'model.rope_scaling={rope_type=\"yarn\",factor=4.0}'"), 2,
               {"--set model.rope_scaling", "\"yarn\" is not implemented"});
  expect_error(train(p, "--set 'model.rope_scaling={" + l3 + "}'"), 2,
               {"model.rope_scaling", "original_max_position_embeddings: missing"});
  expect_error(train(p, "--set 'model.rope_scaling={" + l3 + ",original_max_position_embeddings=64,beta=1}'"), 2,
               {"unknown field \"beta\""});
  expect_error(train(p, "--set 'model.rope_scaling={" +
                            edit(l3, "high_freq_factor=4.0", "high_freq_factor=0.5") +
                            ",original_max_position_embeddings=64}'"),
               2, {"high_freq_factor must be > low_freq_factor"});
  expect_error(train(write(base()), "--set 'model.rope_scaling={" + l3 + ",original_max_position_embeddings=64}'"), 2,
               {"rope_scaling", "gpt2 has learned positions"});
}

// A value that is not one TOML value is refused, not kept as text with its
// quotes; a run name is one path component, printed escaped.
TEST_F(RecipeErrors, OverridesAndRunNamesAreOneThing) {
  const std::string p = write(base());
  expect_error(train(p, "--set 'run.dir=\"/x\" ; x=1'"), 2, {"--set run.dir", "not one TOML value"});
  expect_error(train(p, "--set 'run.name=\"../evil\"'"), 2, {"[run] name", "not one plain path component"});
  expect_error(train(p, "--set 'run.name=\"a/b\"'"), 2, {"not one plain path component"});
  const Outcome o = train(p, "--set 'run.name=\"a\\nb\\u001b[31m\"'");
  expect_error(o, 2, {"\"a\\nb\\u001b[31m\" is not one plain path component"});
  EXPECT_EQ(o.out.find('\x1b'), std::string::npos) << "a terminal escape printed raw";
  expect_error(train(p, "--set 'checkpoint.dir=\"/tmp/a\\u0000b\"'"), 2,
               {"[checkpoint] dir", "\"/tmp/a\\u0000b\" contains a NUL byte"});
}

// A FIFO where a file belongs was opened and waited on forever (ignoring
// SIGTERM): it is refused by name before anything opens it.
TEST_F(RecipeErrors, AFifoIsRefusedNotWaitedOn) {
  const std::string recipe = dir_ + "/fifo.toml", shard = dir_ + "/fifo.bin";
  ::unlink(recipe.c_str()), ::unlink(shard.c_str());
  ASSERT_EQ(::mkfifo(recipe.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  expect_error(train(recipe), 2, {recipe, "is a FIFO, not a regular file"});
  expect_error(train(write(edit(base(), dir_ + "/train.bin", shard))), 3, {shard, "is a FIFO, not a regular file"});
}

// A model far too large is refused from its figures before anything is
// built per layer (a billion layers grew to 13 GB and was killed).
TEST_F(RecipeErrors, AHugeModelIsRefusedBeforeItIsBuilt) {
  const std::string p = write(base());
  expect_error(train(p, "--set model.n_layers=1000000000"), 2, {"[model] n_layers", "100000"});
  const std::string huge = "--set model.d_model=65536 --set model.d_ff=262144 --set model.n_heads=512 "
                           "--set model.n_layers=2000";
  expect_error(train(p, huge), 2, {"for the weights, gradients and AdamW state alone"});
  const Outcome plan = run(std::string(TRAINER_BIN) + " plan " + p + " " + huge);
  EXPECT_NE(plan.out.find("for the weights, gradients and AdamW state alone"), std::string::npos) << plan.out;
}

TEST_F(RecipeErrors, MissingRecipeFile) {
  expect_error(train(dir_ + "/absent.toml"), 2, {dir_ + "/absent.toml", "cannot read the recipe file"});
}

TEST_F(RecipeErrors, BadShardIsADataError) {
  std::ofstream(dir_ + "/bad.bin") << std::string(4096, 'z');
  const std::string p = write(edit(base(), dir_ + "/train.bin", dir_ + "/bad.bin"));
  expect_error(train(p), 3, {dir_ + "/bad.bin", "magic at byte offset 0"});
}

TEST_F(RecipeErrors, TokenBeyondVocabStopsTheJob) {
  // Bytes of "the quick brown fox" go up to 'x' = 120 > vocab 100.
  const Outcome o = train(write(edit(base(), "vocab_size = 256", "vocab_size = 100")));
  EXPECT_EQ(o.code, 3) << o.out;
  EXPECT_NE(o.out.find(dir_ + "/train.bin: token id "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("(byte offset "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("is >= vocab_size 100"), std::string::npos) << o.out;
}

// The real binary: mpirun -np 2 as dp = 2, as tp = 2, and as tp = 2 with
// sequence parallelism give the loss curve of one process for the same global
// batch (the in-process checks are test_dp and test_tp).
TEST_F(RecipeErrors, TwoRanksMatchOneProcessEndToEnd) {
  const std::string p = write(edit(edit(base(), "steps = 2", "steps = 6\nlog_every = 1"), "n_layers = 1", "n_layers = 2"));
  std::vector<std::vector<double>> curves;
  const std::vector<std::pair<int, std::string>> layouts = {
      {1, ""}, {2, ""}, {2, "--set parallel.tp=2"},
      {2, "--set parallel.tp=2 --set parallel.sequence_parallel=true"},
      {2, "--set parallel.pp=2"}};
  for (const auto& [np, extra] : layouts) {
    const std::string dir = dir_ + "/run_" + std::to_string(curves.size());
    const Outcome o = train(p, "--set run.dir=" + dir + " " + extra, np);
    ASSERT_EQ(o.code, 0) << o.out;
    std::ifstream f(dir + "/metrics.jsonl");
    std::vector<double> losses;
    for (std::string line; std::getline(f, line);) {
      const size_t k = line.find("\"loss\": ");
      ASSERT_NE(k, std::string::npos) << line;
      losses.push_back(std::stod(line.substr(k + 8)));
    }
    curves.push_back(losses);
  }
  for (size_t k = 1; k < curves.size(); k++) {
    ASSERT_EQ(curves[k].size(), 6u) << layouts[k].second;
    for (size_t i = 0; i < 6; i++)
      EXPECT_NEAR(curves[k][i], curves[0][i], 1e-5 * curves[0][i]) << layouts[k].second << " step " << i + 1;
  }
  EXPECT_LT(curves[0].back(), curves[0].front());
}

TEST_F(RecipeErrors, PrintConfigRoundTrips) {
  const std::string p = write(base());
  const Outcome o = train(p, "--print-config --set optimizer.warmup_steps=1 --set training.on_nan=rollback "
                            "--set 'fault.inject=[\"slow rank=1 ms=5\"]' --set 'launch.args=[\"--bind-to\", \"none\"]'", 1);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("warmup_steps = 1"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("dp = 1"), std::string::npos) << o.out;
  const std::string resolved = dir_ + "/resolved.toml";
  std::ofstream(resolved) << o.out;
  const Recipe a = load_recipe(p, {"optimizer.warmup_steps=1", "training.on_nan=\"rollback\"",
                                   "fault.inject=[\"slow rank=1 ms=5\"]", "launch.args=[\"--bind-to\", \"none\"]"},
                               1, true);
  const Recipe b = load_recipe(resolved, {}, 1, true);
  EXPECT_EQ(recipe_to_toml(a).substr(recipe_to_toml(a).find('\n')),
            recipe_to_toml(b).substr(recipe_to_toml(b).find('\n')));
}

// A layout plan --search tries is the recipe read once, copied and edited
// (edit_key, apply_defaults, check_recipe); the reference is the file read
// again with the same --set lines. Both give the same recipe, or the same
// error word for word (the blamed key and where it came from), valid
// layouts and refused ones, with global_batch given and derived.
TEST_F(RecipeErrors, ATypedEditIsTheFileWithItsSetLines) {
  using Edits = std::vector<std::pair<std::string, KeyValue>>;
  const std::vector<Edits> layouts = {
      {{"parallel.dp", 2L}, {"parallel.tp", 2L}, {"parallel.pp", 1L}, {"training.micro_batch", 1L}},
      {{"parallel.dp", 1L}, {"parallel.tp", 1L}, {"parallel.pp", 4L}},
      {{"parallel.dp", 4L}, {"training.micro_batch", 2L}},
      {{"parallel.tp", 3L}},
      {{"parallel.dp", 1L}, {"parallel.tp", 4L}, {"parallel.sequence_parallel", true}},
      {{"parallel.dp", 2L}, {"parallel.pp", 2L}, {"parallel.schedule", std::string("interleaved")},
       {"parallel.virtual_stages", 2L}},
      {{"parallel.dp", 4L}, {"training.micro_batch", 1L}, {"recompute.mode", std::string("full")},
       {"parallel.zero_stage", 1L}, {"training.precision", std::string("bf16")}},
      {{"parallel.dp", 2L}, {"parallel.zero_stage", 2L}},
  };
  const std::string given = base(), derived = edit(base(), "global_batch = 4\n", "");
  int valid = 0, refused = 0;
  for (const std::string& text : {given, derived}) {
    const std::string p = write(text);
    const Recipe loaded = load_recipe(p, {}, 0, false);
    for (const Edits& edits : layouts) {
      std::vector<std::string> sets;
      Recipe typed = loaded;
      std::string typed_error;
      for (const auto& [key, value] : edits) {
        sets.push_back(key + "=" + toml_text(*find_recipe_key(key), value));
        if (typed_error.empty()) typed_error = edit_key(typed, key, value);
      }
      if (typed_error.empty()) typed_error = apply_defaults(typed, 4);
      if (typed_error.empty())
        for (const RecipeProblem& pr : check_recipe(typed, 4))
          if (!pr.warning) typed_error = pr.message;
      std::string file_error, file_toml;
      try {
        file_toml = recipe_to_toml(load_recipe(p, sets, 4, false));
      } catch (const RecipeError& e) {
        file_error = e.what();
      }
      std::string label;
      for (const std::string& s : sets) label += " --set " + s;
      EXPECT_EQ(typed_error, file_error) << label;
      if (file_error.empty() && typed_error.empty()) EXPECT_EQ(recipe_to_toml(typed), file_toml) << label;
      (file_error.empty() ? valid : refused)++;
    }
  }
  EXPECT_EQ(valid, 7);  // both kinds compared, with several rules and keys blamed
  EXPECT_EQ(refused, 9);
}
