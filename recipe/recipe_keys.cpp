// The recipe key table. Each entry binds one key to its field in Recipe;
// everything else about the key is said here once.
#include "recipe/recipe_keys.h"

#include <charconv>
#include <type_traits>
#include <utility>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/float_text.h"

namespace trainer {

namespace {

// Field <-> KeyValue. Floats come back as the double with the float's
// shortest decimal form (3e-4f as 0.0003), so they print as written.
KeyValue to_value(int x) { return (long)x; }
KeyValue to_value(long x) { return x; }
KeyValue to_value(uint64_t x) { return (long)x; }
KeyValue to_value(double x) { return x; }
KeyValue to_value(float x) { return float_as_written(x); }
KeyValue to_value(bool x) { return x; }
KeyValue to_value(const std::string& x) { return x; }
KeyValue to_value(const std::vector<std::string>& x) { return x; }
KeyValue to_value(const std::vector<DataSource>& x) { return x; }
KeyValue to_value(const RopeScaling& x) { return x; }

void from_value(int& d, const KeyValue& v) { d = (int)std::get<long>(v); }
void from_value(long& d, const KeyValue& v) { d = std::get<long>(v); }
void from_value(uint64_t& d, const KeyValue& v) { d = (uint64_t)std::get<long>(v); }
void from_value(double& d, const KeyValue& v) { d = std::get<double>(v); }
void from_value(float& d, const KeyValue& v) { d = (float)std::get<double>(v); }
void from_value(bool& d, const KeyValue& v) { d = std::get<bool>(v); }
void from_value(std::string& d, const KeyValue& v) { d = std::get<std::string>(v); }
void from_value(std::vector<std::string>& d, const KeyValue& v) { d = std::get<std::vector<std::string>>(v); }
void from_value(std::vector<DataSource>& d, const KeyValue& v) { d = std::get<std::vector<DataSource>>(v); }
void from_value(RopeScaling& d, const KeyValue& v) { d = std::get<RopeScaling>(v); }

// set and get of a Recipe field: AT(training.steps); and whether the field
// is a float, whose range must hold for the fp32 value too.
#define AT(field)                                                          \
  [](Recipe& r, const KeyValue& v) { from_value(r.field, v); },           \
      [](const Recipe& r) { return to_value(r.field); },                  \
      std::is_same_v<std::remove_cvref_t<decltype(std::declval<Recipe&>().field)>, float>

// An enum field spelled as one of `names` (in enum order).
#define ENUM(field, Type, ...)                                                                 \
  [](Recipe& r, const KeyValue& v) {                                                           \
    const std::vector<std::string> n = {__VA_ARGS__};                                         \
    for (size_t i = 0; i < n.size(); i++)                                                      \
      if (n[i] == std::get<std::string>(v)) r.field = (Type)i;                                 \
  },                                                                                           \
      [](const Recipe& r) { return KeyValue(std::vector<std::string>{__VA_ARGS__}[(size_t)r.field]); }

using Setter = std::function<void(Recipe&, const KeyValue&)>;
using Getter = std::function<KeyValue(const Recipe&)>;

// Builder: K(section, name, type, help, set, get).def(...).at_least(...)...
struct K {
  RecipeKey k;
  K(const char* sec, const char* name, KeyType t, const char* help, Setter set, Getter get, bool fp32 = false) {
    k.section = sec, k.name = name, k.type = t, k.help = help, k.set = std::move(set), k.get = std::move(get);
    k.fp32 = fp32;
  }
  K& def(KeyValue v) {
    k.default_text = toml_text(v, k.type);
    k.def = [v](const Recipe&, int) { return v; };
    return *this;
  }
  K& def(std::function<KeyValue(const Recipe&, int)> f, const char* text) {
    k.def = std::move(f), k.default_text = text;
    return *this;
  }
  K& at_least(double lo) { return k.lo = lo, *this; }
  K& above(double lo) { return k.lo = lo, k.lo_open = true, *this; }
  K& below(double hi) { return k.hi = hi, k.hi_open = true, *this; }
  K& at_most(double hi) { return k.hi = hi, *this; }
  K& or_zero_off() { return k.zero_off = true, *this; }
  K& or_auto(long sentinel) { return k.auto_word = "auto", k.auto_value = sentinel, *this; }
  K& wide() { return k.int_max = 9007199254740992L, *this; }  // long fields (2^53: exact in a double too)
  K& choose(std::vector<std::string> c) { return k.choices = std::move(c), *this; }
  K& shown_if(std::function<bool(const Recipe&)> f) { return k.shown = std::move(f), *this; }
  K& way_of(const char* dim) { return k.way_of = dim, *this; }
  operator RecipeKey() const { return k; }
};

constexpr KeyType Int = KeyType::Int, Float = KeyType::Float, Bool = KeyType::Bool,
                  String = KeyType::String, List = KeyType::List, Choice = KeyType::Choice,
                  Sources = KeyType::Sources, Scaling = KeyType::RopeScaling;
using Strings = std::vector<std::string>;
using SourceList = std::vector<DataSource>;

std::vector<RecipeKey> make_keys() {
  using BS = TrainingSection::BadStep;
  const auto llama = [](const Recipe& r) { return r.model.arch == Arch::Llama; };
  const auto moe = [](const Recipe& r) { return r.model.moe.enabled(); };
  return {
      // [run]
      K("run", "name", String, "name of the run, in logs", AT(run.name)).def(std::string("run")),
      K("run", "dir", String, "where the run writes (metrics, resolved recipe, checkpoints); owned by one run at a time", AT(run.dir))
          .def([](const Recipe& r, int) { return KeyValue("runs/" + r.run.name); }, "\"runs/NAME\""),
      K("run", "seed", Int, "seed of the initial weights and the data order", AT(run.seed)).def(1234L).at_least(0).wide(),
      // [model]
      K("model", "arch", Choice, "model family", ENUM(model.arch, Arch, "gpt2", "llama"))
          .def(std::string("gpt2")).choose({"gpt2", "llama"}),
      K("model", "vocab_size", Int, "vocabulary size (tokens are ids below it)", AT(model.vocab_size)).def(256L).at_least(1),
      K("model", "d_model", Int, "width", AT(model.d_model)).def(128L).at_least(1),
      K("model", "n_layers", Int, "transformer layers", AT(model.n_layers)).def(4L).at_least(1).at_most(100000),
      K("model", "n_heads", Int, "attention (query) heads; d_model must divide by it", AT(model.n_heads)).def(4L).at_least(1),
      K("model", "n_kv_heads", Int, "key/value heads (grouped-query attention; llama only)", AT(model.n_kv_heads))
          .def([](const Recipe& r, int) { return KeyValue((long)r.model.n_heads); }, "n_heads")
          .at_least(1).shown_if(llama),
      K("model", "d_ff", Int, "MLP hidden width", AT(model.d_ff))
          .def([](const Recipe& r, int) { return KeyValue(4L * r.model.d_model); }, "4 * d_model").at_least(1),
      K("model", "seq_len", Int, "tokens per sequence", AT(model.seq_len)).def(128L).at_least(1),
      K("model", "tie_embeddings", Bool, "the LM head shares the token embedding", AT(model.tie_embeddings))
          .def([](const Recipe& r, int) { return KeyValue(r.model.arch == Arch::GPT2); }, "true for gpt2, false for llama"),
      K("model", "norm_eps", Float, "epsilon of LayerNorm / RMSNorm", AT(model.norm_eps))
          .def([](const Recipe& r, int) { return KeyValue(r.model.arch == Arch::GPT2 ? 1e-5 : 1e-6); }, "1e-5 gpt2, 1e-6 llama")
          .above(0).below(1),
      K("model", "rope_theta", Float, "RoPE base (llama only)", AT(model.rope_theta)).def(10000.0).above(1).shown_if(llama),
      K("model", "rope_scaling", Scaling, "RoPE frequency scaling as in Hugging Face's config.json (llama only): "
        "{ rope_type = \"llama3\", factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, "
        "original_max_position_embeddings = 8192 } (Llama 3.1-3.3), or {} for none", AT(model.rope_scaling))
          .def(RopeScaling{}).shown_if(llama),
      // [moe]
      K("moe", "experts", Int, "Mixture-of-Experts: routed experts in every layer's MLP (llama; 0: dense MLPs; "
        "tp needs sequence_parallel; parallel.ep splits them)", AT(model.moe.experts))
          .def(0L).at_least(0).at_most(4096),
      K("moe", "top_k", Int, "experts each token goes to", AT(model.moe.top_k)).def(2L).at_least(1)
          .shown_if(moe),
      K("moe", "expert_ffn", Int, "each expert's hidden width (SwiGLU)", AT(model.moe.expert_ffn))
          .def([](const Recipe& r, int) { return KeyValue((long)r.model.d_ff); }, "d_ff").at_least(1).shown_if(moe),
      K("moe", "score", Choice, "the router's scores of its fp32 logits: \"softmax\" over the experts, or "
        "\"sigmoid\" of each", ENUM(model.moe.score, MoeConfig::Score, "softmax", "sigmoid"))
          .def(std::string("softmax")).choose({"softmax", "sigmoid"}).shown_if(moe),
      K("moe", "norm_topk", Bool, "the chosen experts' weights are their scores over the sum of them (false: the "
        "scores)", AT(model.moe.norm_topk)).def(true).shown_if(moe),
      K("moe", "aux_coeff", Float, "load-balancing loss, coeff x E x sum over experts of (share of the sequence's "
        "choices) x (mean score), averaged over sequences (DeepSeek-V3's sequence-wise Switch loss; 0: off)",
        AT(model.moe.aux_coeff))
          .def(0.01).at_least(0).shown_if(moe),
      K("moe", "z_coeff", Float, "router z-loss, coeff x the mean over tokens of logsumexp(logits)^2 (0: off)",
        AT(model.moe.z_coeff))
          .def(0.001).at_least(0).shown_if(moe),
      K("moe", "shared_expert_ffn", Int, "hidden width of a shared SwiGLU expert every token goes to, beside its "
        "routed ones (0: none)", AT(model.moe.shared_expert_ffn))
          .def(0L).at_least(0).shown_if(moe),
      K("moe", "dense_layers", Int, "the first layers keep a dense MLP (d_ff)", AT(model.moe.dense_layers))
          .def(0L).at_least(0).shown_if(moe),
      K("moe", "capacity_factor", Float, "an expert takes at most ceil(factor x top_k x rows / experts) of each "
        "rank's micro-batch; the rest are dropped, keeping their residual (0: dropless)", AT(model.moe.capacity_factor))
          .def(0.0).at_least(0).shown_if(moe),
      K("moe", "bias_rate", Float, "auxiliary-loss-free balancing (DeepSeek-V3): a per-expert bias added to the "
        "scores for choosing (never weighing) moves by this much after each step, up for experts below the "
        "mean load, down above (0: no bias)", AT(model.moe.bias_rate))
          .def(0.0).at_least(0).shown_if(moe),
      // [parallel]
      K("parallel", "tp", Int, "tensor-parallel ranks; n_heads, n_kv_heads, d_ff and vocab_size must divide by it", AT(parallel.grid.tp))
          .def(1L).at_least(1).at_most(GridShape::kMaxRanks),
      K("parallel", "pp", Int, "pipeline stages; n_layers must divide by pp * virtual_stages", AT(parallel.grid.pp)).def(1L).at_least(1).at_most(GridShape::kMaxRanks),
      K("parallel", "cp", Int, "context-parallel ranks: each sequence is cut along its length over them "
        "(activations per rank about 1/cp; attention as parallel.cp_comm says); seq_len must divide by 2 * cp",
        AT(parallel.grid.cp))
          .def(1L).at_least(1).at_most(GridShape::kMaxRanks),
      K("parallel", "ep", Int, "expert-parallel ranks: each Mixture-of-Experts layer's experts split over ep of "
        "the dp * cp weight replicas (which must divide by it, as must moe.experts); tokens travel to their "
        "experts and back by all-to-all", AT(parallel.grid.ep))
          .def(1L).at_least(1).at_most(GridShape::kMaxRanks),
      K("parallel", "cp_comm", Choice, "context parallelism's attention: \"ring\" passes the k|v blocks round the cp "
        "ranks while attending (any head count); \"a2a\" (DeepSpeed's Ulysses) turns sequence shards into head shards "
        "with an all-to-all, attends to whole sequences, and turns back (n_heads and n_kv_heads must divide by cp * tp)",
        ENUM(parallel.cp_comm, CpComm, "ring", "a2a"))
          .def(std::string("ring")).choose({"ring", "a2a"}).way_of("cp"),
      K("parallel", "cp_overlap", Bool, "ring attention attends to the block in hand while the next one travels "
        "(false: waits for each transfer first; the same result)", AT(parallel.cp_overlap))
          .def(true),
      K("parallel", "dp", Int, "data-parallel replicas", AT(parallel.grid.dp))
          .def([](const Recipe& r, int world) { return KeyValue(world > 0 ? (long)world / r.parallel.model_ranks() : 1L); },
               "world size / (tp * cp * pp)")
          .at_least(1).at_most(GridShape::kMaxRanks),
      K("parallel", "sequence_parallel", Bool, "shard activations along the sequence between TP regions (needs seq_len divisible by tp)",
        AT(parallel.sequence_parallel)).def(false),
      K("parallel", "schedule", Choice, "pipeline schedule", ENUM(parallel.schedule, ScheduleKind, "1f1b", "interleaved"))
          .def(std::string("1f1b")).choose({"1f1b", "interleaved"}),
      K("parallel", "virtual_stages", Int, "model chunks per pipeline stage (interleaved: >= 2; micro-batches per step must be a multiple of pp)",
        AT(parallel.virtual_stages))
          .def([](const Recipe& r, int) { return KeyValue(r.parallel.schedule == ScheduleKind::Interleaved ? 2L : 1L); },
               "1; 2 for interleaved")
          .at_least(1).at_most(GridShape::kMaxRanks),
      K("parallel", "dp_bucket_mb", Float, "MB of gradients per data-parallel all-reduce bucket (buckets start during "
        "the last backward; ZeRO-2 and 3 reduce each layer on its own instead)", AT(parallel.dp_bucket_mb))
          .def(25.0).above(0),
      K("parallel", "dp_overlap", Bool, "start each bucket's all-reduce as soon as its gradients are final, while the "
        "backward goes on (false: all after the backward; the same result; ZeRO-2 and 3: always)", AT(parallel.dp_overlap))
          .def(true),
      K("parallel", "zero_stage", Int, "0: every data-parallel rank keeps all of AdamW's state; 1: ZeRO-1, each keeps "
        "1/(dp * cp) of it (gradients reduce-scattered, updated weights all-gathered) and writes that part to a checkpoint file of "
        "its own; 2: ZeRO-2, also only 1/(dp * cp) of the gradients (each layer's reduce-scattered as soon as the backward "
        "has it, every micro-batch); 3: ZeRO-3 (FSDP), also only 1/(dp * cp) of the weights, each layer's (and an "
        "untied embedding's and head's) all-gathered when it computes (the next ones already travelling: parallel.zero_prefetch) and dropped after", AT(parallel.zero_stage))
          .def(0L).at_least(0).at_most(ParallelSection::kMaxZeroStage),
      K("parallel", "reshard_after_forward", Bool, "ZeRO-3: drop a layer's gathered weights after its forward and "
        "gather them again for its backward (false: keep every gathered unit until the step's update: one gather "
        "per step, the stage's whole weights held)", AT(parallel.reshard_after_forward))
          .def([](const Recipe& r, int) { return KeyValue(r.parallel.grid.pp == 1); },
               "true with pp = 1, else false (micro-batches in flight would gather each layer again)"),
      K("parallel", "zero_prefetch", Int, "ZeRO-3: how many of the pass's next layers are being gathered while a layer "
        "computes (0: each layer's gather waited for when it starts; with reshard_after_forward = true each more "
        "holds one more window of the largest unit taking turns, a layer or an untied embedding or head; false: "
        "the first forward prefetches into the kept windows)",
        AT(parallel.zero_prefetch))
          .def(1L).at_least(0).at_most(ParallelSection::kMaxZeroPrefetch),
      K("parallel", "zero_persist_below", Int, "ZeRO-3: a layer whose norm weights and biases each hold fewer "
        "elements than this keeps them gathered for the whole step (gathered once after the update, their "
        "gradients reduce-scattered once a step: two collectives a layer and step) instead of with the layer's "
        "matrices in every pass (0: never; those gathers carry them anyway, so this saves their bytes per pass, "
        "not a collective)",
        AT(parallel.zero_persist_below))
          .def(0L).at_least(0).wide(),
      // [training]
      K("training", "steps", Int, "optimizer steps of the whole run", AT(training.steps)).def(100L).at_least(1).wide(),
      K("training", "micro_batch", Int, "sequences per micro-batch and rank", AT(training.micro_batch)).def(1L).at_least(1),
      K("training", "global_batch", Int, "sequences per optimizer step, all ranks (accumulation = global_batch / (micro_batch * dp))",
        AT(training.global_batch))
          .def([](const Recipe& r, int) { return KeyValue((long)r.training.micro_batch * r.parallel.grid.dp); }, "micro_batch * dp")
          .at_least(1),
      K("training", "precision", Choice,
        "fp32, or bf16: bf16 weights in products, activations and gradient communication; fp32 master weights, "
        "gradient accumulation, optimizer state, loss and softmax statistics",
        ENUM(training.precision, DType, "fp32", "bf16")).def(std::string("fp32")).choose({"fp32", "bf16"}),
      K("training", "grad_clip", Float, "global gradient-norm clip", AT(training.grad_clip)).def(1.0).at_least(0),
      K("training", "eval_every", Int, "steps between evaluations (0: only at the end, with val data)", AT(training.eval_every))
          .def(0L).at_least(0),
      K("training", "eval_batches", Int, "validation micro-batches per rank and evaluation", AT(training.eval_batches)).def(4L).at_least(1),
      K("training", "log_every", Int, "steps between log lines and metrics records (the first and last step, evaluations, checkpoints and warnings are always logged)",
        AT(training.log_every)).def(1L).at_least(1),
      K("training", "exit_after", Int, "stop this launch after that many steps, to resume later (0: run to steps)",
        AT(training.exit_after)).def(0L).at_least(0).wide(),
      K("training", "on_nan", Choice, "a NaN/Inf loss or gradient: stop (exit 6), skip the update, or rollback to the newest checkpoint and skip the batches since",
        ENUM(training.on_nan, BS, "stop", "skip", "rollback")).def(std::string("stop")).choose({"stop", "skip", "rollback"}),
      K("training", "spike_factor", Float, "a loss above this x the median of the last spike_window steps is a spike",
        AT(training.spike_factor)).def(0.0).above(1).or_zero_off(),
      K("training", "spike_window", Int, "applied steps the spike median looks back over", AT(training.spike_window)).def(50L).at_least(5),
      K("training", "on_spike", Choice, "a loss spike: as on_nan", ENUM(training.on_spike, BS, "stop", "skip", "rollback"))
          .def(std::string("skip")).choose({"stop", "skip", "rollback"}),
      // [optimizer]
      K("optimizer", "lr", Float, "peak learning rate", AT(lr.lr)).def(3e-4).above(0),
      K("optimizer", "min_lr", Float, "learning rate at the last step (at most lr)", AT(lr.min_lr))
          .def([](const Recipe& r, int) { return KeyValue(std::get<double>(to_value(r.lr.lr)) / 10); }, "lr / 10")
          .at_least(0),
      K("optimizer", "warmup_steps", Int, "linear warm-up steps", AT(lr.warmup_steps)).def(0L).at_least(0),
      K("optimizer", "schedule", Choice, "decay after warm-up", ENUM(lr.schedule, LrSchedule, "cosine", "linear", "constant"))
          .def(std::string("cosine")).choose({"cosine", "linear", "constant"}),
      K("optimizer", "weight_decay", Float, "AdamW weight decay (matrices and embeddings only)", AT(adamw.weight_decay))
          .def(0.1).at_least(0),
      K("optimizer", "beta1", Float, "AdamW beta1", AT(adamw.beta1)).def(0.9).at_least(0).below(1),
      K("optimizer", "beta2", Float, "AdamW beta2", AT(adamw.beta2)).def(0.95).at_least(0).below(1),
      K("optimizer", "eps", Float, "AdamW epsilon", AT(adamw.eps)).def(1e-8).above(0),
      // [recompute]
      K("recompute", "mode", Choice, "activation recomputation: selective drops the MLP activation (attention keeps only per-row statistics anyway); full keeps only layer inputs",
        ENUM(recompute.mode, RecomputeMode, "none", "selective", "full"))
          .def(std::string("none")).choose({"none", "selective", "full"}),
      K("recompute", "layers", Int, "recompute the first K layers of each pipeline chunk (-1: all)", AT(recompute.layers))
          .def(-1L).at_least(-1),
      // [checkpoint]
      K("checkpoint", "every", Int, "steps between checkpoints (0: none; the last step of a launch is saved too); \"auto\": Daly's refinement of Young's interval sqrt(2 x save time x checkpoint.mtbf_hours), from the measured blocking save time, re-estimated after every save", AT(checkpoint.every))
          .def(0L).at_least(0).or_auto(kCheckpointEveryAuto),
      K("checkpoint", "mtbf_hours", Float, "the job's mean time between failures, for checkpoint.every = \"auto\" (and the plan's and smoke's interval)", AT(checkpoint.mtbf_hours))
          .def(24.0).above(0),
      K("checkpoint", "dir", String, "where checkpoints go; owned by one run at a time", AT(checkpoint.dir))
          .def([](const Recipe& r, int) { return KeyValue(r.run.dir + "/checkpoints"); }, "\"RUN_DIR/checkpoints\""),
      K("checkpoint", "keep", Int, "newest checkpoints kept (0: all); only this run's own are ever deleted", AT(checkpoint.keep))
          .def(3L).at_least(0),
      K("checkpoint", "resume", String, "\"auto\" (newest valid in dir), \"none\" (refused if dir holds checkpoints), or a checkpoint path",
        AT(checkpoint.resume)).def(std::string("auto")),
      // [metrics]
      K("metrics", "tensorboard", Bool, "also write every number of metrics.jsonl as TensorBoard scalars", AT(metrics.tensorboard)).def(false),
      K("metrics", "tensorboard_dir", String, "where the TensorBoard event files go", AT(metrics.tensorboard_dir))
          .def([](const Recipe& r, int) { return KeyValue(r.run.dir + "/tensorboard"); }, "\"RUN_DIR/tensorboard\""),
      K("checkpoint", "init_from", String, "a Hugging Face model directory (config.json + safetensors, GPT-2 or Llama) whose weights a new run starts from; the optimizer starts fresh; ignored when resuming", AT(checkpoint.init_from)).def(std::string("")),
      K("checkpoint", "required", Bool, "a failed save stops training (exit 4) instead of a warning", AT(checkpoint.required)).def(false),
      K("checkpoint", "async", Bool, "write checkpoints in the background from a host snapshot", AT(checkpoint.async)).def(false),
      K("checkpoint", "allow_changes", List, "keys (\"data.train\", \"model.*\", \"run.seed\", or \"all\") allowed to differ from the resumed checkpoint's recipe",
        AT(checkpoint.allow_changes)).def(Strings{}),
      // [runtime]
      K("runtime", "threads", Int, "CPU threads per rank", AT(runtime.threads)).def(1L).at_least(1).at_most(1024),
      K("runtime", "cpu_kernels", Choice, "the CPU backend's elementwise kernel set (all give the same bits; a set the CPU lacks, or that $TRAINER_CPU_KERNELS caps away, is refused): \"auto\" is the widest allowed; `trainer --version` says which runs",
        AT(runtime.cpu_kernels)).def(std::string("auto")).choose({"auto", "avx512", "avx2", "generic"}),
      K("runtime", "backend", Choice, "compute backend (\"cuda\": one GPU per rank; `trainer --version` lists those built in)",
        AT(runtime.backend)).def(std::string("cpu")).choose({"cpu", "cuda"}),
      K("runtime", "allow_tf32", Bool, "CUDA: fp32 matrix products may use TF32 tensor cores (faster, ~1e-3 relative error)",
        AT(runtime.allow_tf32)).def(false),
      K("runtime", "deterministic_attention", Bool, "CUDA, bf16: cuDNN's deterministic attention backward (bitwise reruns; a B x H x T^2 fp32 workspace, which `trainer plan` shows); false for long sequences: a workspace linear in T, last-bit differences between reruns",
        AT(runtime.deterministic_attention)).def(true),
      K("runtime", "peak_gflops", Float, "peak GFLOP/s per rank for MFU (0: measured once per machine and cached)",
        AT(runtime.peak_gflops)).def(0.0).at_least(0),
      K("runtime", "comm_timeout", Float, "seconds a rank may sit in one communication call (or make no progress) before its watchdog ends the job (exit 5; 0: off); the node health check probes the hosts this often (one that stops answering ends it, exit 10)",
        AT(runtime.comm_timeout)).def(600.0).at_least(0),
      K("runtime", "straggler_factor", Float, "name a rank whose compute time exceeds what its stage should take by this factor",
        AT(runtime.straggler_factor)).def(1.5).above(1).or_zero_off(),
      K("runtime", "straggler_every", Int, "steps between straggler reports", AT(runtime.straggler_every)).def(10L).at_least(1),
      K("runtime", "throughput_drop", Float,
        "report (events.jsonl, stderr, `trainer status`) when the median step over the last throughput_window steps "
        "gives fewer tokens/s than this fraction of the launch's early baseline, with the part of the step that grew",
        AT(runtime.throughput_drop)).def(0.8).above(0).below(1).or_zero_off(),
      K("runtime", "throughput_window", Int,
        "steps in the baseline (after the first 2 of a launch) and in the watched window",
        AT(runtime.throughput_window)).def(50L).at_least(2),
      K("runtime", "memory_check", Bool, "stop before allocating (exit 2) when the predicted memory per rank exceeds its share of the node's",
        AT(runtime.memory_check)).def(true),
      // [supervisor]
      K("supervisor", "max_restarts", Int, "relaunches after failures before `supervise` gives up (exit 7)", AT(supervisor.max_restarts))
          .def(3L).at_least(0),
      K("supervisor", "hang_timeout", Float, "seconds without a finished step (set-up included) before `supervise` kills the job (0: off)",
        AT(supervisor.hang_timeout)).def(900.0).at_least(0),
      K("supervisor", "start_timeout", Float, "with an allocation (launch.hosts, hostfile or nodes): seconds until a "
        "rank runs on each of a launch's hosts; then the launch is stopped, and a host whose ranks never started (or, "
        "when none did, that alone fails a launch of `trainer version`) is replaced by a spare (0: off: no start "
        "marks, no probes)",
        AT(supervisor.start_timeout)).def(300.0).at_least(0),
      K("supervisor", "backoff", Float, "seconds before the first relaunch, doubling each time", AT(supervisor.backoff)).def(5.0).at_least(0),
      K("supervisor", "backoff_max", Float, "longest wait between relaunches (>= backoff)", AT(supervisor.backoff_max)).def(60.0).at_least(0),
      K("supervisor", "on_straggler", Choice, "with an allocation and a spare: \"replace\" swaps a host the straggler "
        "reports (runtime.straggler_factor) name supervisor.straggler_windows reports in a row for a spare (the job "
        "checkpoints and stops, the host is excluded, the run resumes on the spare); \"report\" only names it",
        AT(supervisor.on_straggler)).def(std::string("report")).choose({"report", "replace"}),
      K("supervisor", "straggler_windows", Int, "straggler reports in a row (runtime.straggler_every steps each) that "
        "must name the same host before supervisor.on_straggler = \"replace\" swaps it",
        AT(supervisor.straggler_windows)).def(3L).at_least(1),
      K("supervisor", "elastic", Bool, "with an allocation, when a host is excluded and no spare is left: relaunch "
        "on the hosts left with fewer data-parallel replicas and the same global batch (more micro-batches per "
        "replica, the same samples in the same order; `trainer plan --nodes N` shows that job) instead of exit 7",
        AT(supervisor.elastic)).def(false),
      K("supervisor", "spare_wait", Float, "with an allocation, when a host is excluded, no spare is left and "
        "elastic is false: seconds to wait for the hosts to come back (`trainer health` on each excluded host beside "
        "the usable ones, every spare_check_every seconds) before exit 7 (0: exit 7 at once)",
        AT(supervisor.spare_wait)).def(0.0).at_least(0),
      K("supervisor", "spare_check_every", Float, "seconds between the health checks of the excluded hosts while "
        "supervisor.spare_wait waits", AT(supervisor.spare_check_every)).def(30.0).above(0),
      K("supervisor", "readmit", Bool, "an excluded host that passes `trainer health` again while supervisor.spare_wait "
        "waits returns to the allocation (never during a launch); false: it stays out for the rest of the run",
        AT(supervisor.readmit)).def(false),
      // [launch]
      K("launch", "launcher", Choice, "how `supervise` starts the job", AT(launch.launcher))
          .def(std::string("mpirun")).choose({"mpirun", "srun"}),
      K("launch", "ranks", Int, "ranks `supervise` launches (0: dp * pp * cp * tp)", AT(launch.ranks)).def(0L).at_least(0).at_most(GridShape::kMaxRanks),
      K("launch", "args", List, "extra launcher arguments", AT(launch.args)).def(Strings{}),
      K("launch", "hosts", List, "the hosts `supervise` may launch on, in order (under Slurm launch.nodes alone "
        "picks from the job's own nodes, SLURM_JOB_NODELIST)", AT(launch.hosts)).def(Strings{}),
      K("launch", "hostfile", String, "a file of hosts for `supervise`, one a line as Open MPI's hostfiles "
        "(\"name slots=N\"), instead of launch.hosts", AT(launch.hostfile)).def(std::string()),
      K("launch", "nodes", Int, "hosts each launch of `supervise` runs on (0: all of them); the rest are spares "
        "that replace a host a failure is blamed on", AT(launch.nodes)).def(0L).at_least(0).at_most(GridShape::kMaxRanks),
      // [health]
      K("health", "check", Bool, "`trainer train` first runs `trainer health`'s measurements on every node and "
        "stops with exit 10 when one is unfit; `supervise` with an allocation runs `trainer health` on every usable "
        "host before each launch instead and excludes the unfit ones", AT(health.check))
          .def(false),
      K("health", "min_ratio", Float, "`trainer health` calls a node slow when one of its figures (product speed, "
        "memory bandwidth, free memory, disk, network, a GPU's clock under load) is below this fraction of the nodes' "
        "median", AT(health.min_ratio))
          .def(0.8).above(0).at_most(1),
      K("health", "in_turn", Bool, "the nodes measure their own figures one after another instead of all at once "
        "(for nodes that share hardware, as scripts/fake_cluster.sh's hosts do)", AT(health.in_turn))
          .def(false),
      // [fault]
      K("fault", "inject", List, "test-only fault injection (recipe/fault.h), e.g. \"crash rank=1 step=7\"", AT(fault_specs))
          .def(Strings{}).shown_if([](const Recipe& r) { return !r.fault_specs.empty(); }),
      // [data]
      K("data", "train", Sources, "training token files (llm.c shards, Megatron prefixes): paths or globs, or a blend of { path = \"...\", weight = 0.3, name = \"web\" } sources (weights are shares of samples)", AT(data.train)).def(SourceList{}),
      K("data", "val", Sources, "validation token files, as data.train; named sources get their own val_loss/NAME", AT(data.val)).def(SourceList{}),
      K("data", "tokenizer", String, "the tokenizer that made the data (a `data prepare --tokenizer` spec): read from "
        "data_info.json beside the shards, where every source (train, val, blend members) must name the same one; "
        "give it only for shards without data_info.json. Kept in each checkpoint: `ckpt export` writes its files",
        AT(data.tokenizer)).def(std::string()),
      K("data", "prefetch", Int, "micro-batches a background thread keeps ready (0: load on the training thread)", AT(data.prefetch))
          .def(2L).at_least(0).at_most(64),
  };
}

std::string number(double x, KeyType t) {
  if (t == KeyType::Int || (x == std::floor(x) && std::fabs(x) < 1e15)) return std::to_string((long)x);
  return toml_text(x, KeyType::Float);
}

}  // namespace

const std::vector<RecipeKey>& recipe_keys() {
  static const std::vector<RecipeKey> keys = make_keys();
  return keys;
}

Recipe default_recipe(int world_size) {
  Recipe r;
  for (const RecipeKey& k : recipe_keys()) k.set(r, k.def(r, world_size));
  return r;
}

std::string apply_default(const RecipeKey& k, Recipe& r, int world_size) {
  const KeyValue v = k.def(r, world_size);
  if (k.type == KeyType::Int && !k.is_auto(v)) {
    // A default computed from other keys that its field cannot hold (d_ff
    // = 4 * d_model past 32 bits): the message names those keys, which the
    // user did set. (Other defaults out of range are left to the rules,
    // which say why in the recipe's terms.)
    const long i = std::get<long>(v);
    if (i > k.int_max || i < -k.int_max - 1)
      return "not set, and its default " + k.default_text + " comes to " + std::to_string(i) +
             ", more than its field holds (at most " + std::to_string(k.int_max) + "); set " + k.full() +
             ", or change the keys its default comes from";
  }
  k.set(r, v);
  return "";
}

std::string apply_defaults(Recipe& r, int world_size) {
  for (const RecipeKey& k : recipe_keys()) {
    if (r.origin.given.count(k.full())) continue;
    if (const std::string why = apply_default(k, r, world_size); !why.empty())
      return r.origin.problem(k.section, k.name, why);
  }
  return "";
}

const RecipeKey* find_recipe_key(const std::string& full_key) {
  for (const RecipeKey& k : recipe_keys())
    if (k.full() == full_key) return &k;
  return nullptr;
}

std::vector<const RecipeKey*> ways_of(const char* dim) {
  std::vector<const RecipeKey*> out;
  for (const RecipeKey& k : recipe_keys())
    if (k.way_of == dim) out.push_back(&k);
  return out;
}

std::string edit_key(Recipe& r, const std::string& full_key, const KeyValue& value) {
  const RecipeKey* k = find_recipe_key(full_key);
  if (!k) return "--set " + full_key + ": unknown key";
  r.origin.given.insert(full_key), r.origin.overridden.insert(full_key);
  KeyValue v = value;  // an integer for a number key, as the reader takes one
  if (k->type == KeyType::Float && std::holds_alternative<long>(v)) v = (double)std::get<long>(v);
  if (const std::string why = k->check(v); !why.empty())
    return r.origin.problem(k->section, k->name, why);
  k->set(r, v);
  return "";
}

const std::vector<std::string>& recipe_sections() {
  static const std::vector<std::string> s = {"run", "model", "moe", "data", "training", "optimizer", "parallel", "recompute",
                                             "checkpoint", "metrics", "runtime", "supervisor", "launch", "health",
                                             "fault"};
  return s;
}

namespace {
// ">= 1", "in [0, 1)", "> 1, or 0 (off)": a number key's range in words.
std::string bounds(const RecipeKey& k) {
  const bool has_lo = k.lo > -1e299, has_hi = k.hi < 1e299;
  std::string s;
  if (has_lo && has_hi)
    s = std::string("in ") + (k.lo_open ? "(" : "[") + number(k.lo, k.type) + ", " + number(k.hi, k.type) +
        (k.hi_open ? ")" : "]");
  else if (has_lo)
    s = (k.lo_open ? "> " : ">= ") + number(k.lo, k.type);
  else if (has_hi)
    s = (k.hi_open ? "< " : "<= ") + number(k.hi, k.type);
  if (k.zero_off) s += ", or 0 (off)";
  return s;
}
}  // namespace

std::string RecipeKey::allowed() const {
  switch (type) {
    case KeyType::Bool: return "true or false";
    case KeyType::String: return "a string";
    case KeyType::List: return "a list of strings";
    case KeyType::Sources: return "a list of paths/globs, or of { path, weight, name } tables";
    case KeyType::RopeScaling: return "{} or a table with rope_type = \"llama3\" and its four fields";
    case KeyType::Choice: {
      std::string s;
      for (const auto& c : choices) s += (s.empty() ? "\"" : ", \"") + c + "\"";
      return s;
    }
    default: break;
  }
  const std::string b = bounds(*this);
  return std::string(type == KeyType::Int ? "an integer" : "a number") + (b.empty() ? "" : " " + b) +
         (auto_word.empty() ? "" : ", or \"" + auto_word + "\"");
}

namespace {
// Blends: all entries weighted (each its own source) or none (one source of
// all files); names distinct.
std::string check_sources(const std::vector<DataSource>& l) {
  size_t weighted = 0;
  for (size_t i = 0; i < l.size(); i++) {
    const DataSource& s = l[i];
    if (s.path.empty()) return "entry " + std::to_string(i + 1) + " has no path";
    if (!std::isfinite(s.weight) || s.weight < 0)
      return "entry " + std::to_string(i + 1) + " (" + s.path + "): weight must be a finite number > 0";
    weighted += s.weight > 0;
    for (size_t j = 0; j < i; j++)
      if (!s.name.empty() && l[j].name == s.name) return "two sources are named \"" + s.name + "\"";
  }
  if (weighted && weighted != l.size())
    return "give every entry a weight (a blend), or none; " + std::to_string(l.size() - weighted) + " of " +
           std::to_string(l.size()) + " have none";
  return "";
}
}  // namespace

std::string RecipeKey::check(const KeyValue& v) const {
  double x = 0;
  if (type == KeyType::Int) {
    if (is_auto(v)) return "";
    const long i = std::get<long>(v);
    if ((i > int_max || i < -int_max - 1) && (double)i >= lo && (double)i <= hi)
      return std::to_string(i) + " is out of range: must be " + bounds(*this) + " and fit in " +
             (int_max > 2147483647L ? "53 bits" : "32 bits (at most 2147483647)");
    x = (double)i;
    if (i > int_max || i < -int_max - 1) return "must be " + bounds(*this) + ", got " + std::to_string(i);
  } else if (type == KeyType::Float) {
    x = std::get<double>(v);
    if (!std::isfinite(x)) return "must be a finite number " + bounds(*this) + ", got " + std::string(std::isnan(x) ? "nan" : "inf");
  } else if (type == KeyType::Sources) {
    return check_sources(std::get<std::vector<DataSource>>(v));
  } else if (type == KeyType::RopeScaling) {
    return rope_scaling_problem(std::get<RopeScaling>(v));
  } else if (type == KeyType::Choice) {
    for (const auto& c : choices)
      if (c == std::get<std::string>(v)) return "";
    return "must be one of " + allowed();
  } else {
    return "";
  }
  if (zero_off && x == 0) return "";
  const auto in_range = [&](double y) { return (lo_open ? y > lo : y >= lo) && (hi_open ? y < hi : y <= hi); };
  if (!in_range(x)) return "must be " + bounds(*this) + ", got " + number(x, type);
  // A float field holds the value rounded to fp32: 0.99999999 is 1 there
  // (an AdamW beta of 1 divides by zero: NaN weights), 1e-50 is 0, 1e39 inf.
  const double f = (double)(float)x;
  if (fp32 && (!std::isfinite(f) || !in_range(f)))
    return "must be " + bounds(*this) + " in fp32, the precision it is used in; " + number(x, type) + " is " +
           (std::isfinite(f) ? number(f, type) : std::string(f > 0 ? "inf" : "-inf")) + " there";
  return "";
}

std::string toml_text(const RecipeKey& k, const KeyValue& v) {
  return k.is_auto(v) ? "\"" + k.auto_word + "\"" : toml_text(v, k.type);
}

std::string toml_text(const KeyValue& v, KeyType type) {
  struct Visitor {
    KeyType type;
    std::string operator()(long x) const { return std::to_string(x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(double x) const {
      char b[40];
      const auto res = std::to_chars(b, b + sizeof b - 1, x);  // shortest that reads back the same
      *res.ptr = 0;
      std::string s = b;
      if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // stays a TOML float
      return s;
    }
    std::string operator()(const std::string& s) const {
      std::string q = "\"";
      for (unsigned char c : s) {
        if (c == '"' || c == '\\') q += '\\', q += (char)c;
        else if (c == '\n') q += "\\n";
        else if (c == '\t') q += "\\t";
        else if (c < 0x20 || c == 0x7f) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          q += b;
        } else {
          q += (char)c;
        }
      }
      return q + "\"";
    }
    std::string operator()(const std::vector<std::string>& l) const {
      std::string s = "[";
      for (size_t i = 0; i < l.size(); i++) s += (i ? ", " : "") + (*this)(l[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<DataSource>& l) const {
      std::string s = "[";
      for (size_t i = 0; i < l.size(); i++) {
        s += i ? ", " : "";
        if (l[i].weight == 0 && l[i].name.empty()) {
          s += (*this)(l[i].path);
          continue;
        }
        s += "{ path = " + (*this)(l[i].path) + (l[i].weight > 0 ? ", weight = " + (*this)(l[i].weight) : "");
        s += (l[i].name.empty() ? "" : ", name = " + (*this)(l[i].name)) + " }";
      }
      return s + "]";
    }
    std::string operator()(const RopeScaling& r) const { return rope_scaling_toml(r); }
  };
  return std::visit(Visitor{type}, v);
}

std::string describe_keys(bool markdown) {
  std::string out;
  if (markdown) out = "| key | default | allowed | meaning |\n|---|---|---|---|\n";
  for (const std::string& sec : recipe_sections())
    for (const RecipeKey& k : recipe_keys()) {
      if (k.section != sec) continue;
      if (markdown) {
        std::string def = k.default_text, allowed = k.allowed();
        for (std::string* s : {&def, &allowed})
          for (size_t p = 0; (p = s->find('|', p)) != std::string::npos; p += 2) s->replace(p, 1, "\\|");
        out += "| `" + k.full() + "` | " + def + " | " + allowed + " | " + k.help + " |\n";
      } else {
        out += k.full() + " = " + k.default_text + "  (" + k.allowed() + ")\n    " + k.help + "\n";
      }
    }
  return out;
}

}  // namespace trainer
