// `trainer ckpt inspect|verify|export`: look into checkpoints without MPI.
#include <cerrno>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "app/environment.h"
#include "app/commands.h"
#include "ckpt/output_guard.h"
#include "app/recipe.h"
#include "app/recipe_args.h"
#include "data/dataset.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hdf5_tensors.h"
#include "ckpt/hf_export.h"
#include "runtime/errors.h"
#include "runtime/units.h"

namespace trainer {

namespace {

const char* kCkptUsage =
    "usage: trainer ckpt inspect PATH              layout, step, files and tensors\n"
    "       trainer ckpt verify PATH               every checksum, and every tensor complete\n"
    "       trainer ckpt export PATH --output F.h5 [--dtype fp32|bf16] [--force]\n"
    "                                              one HDF5 file, Hugging Face names; fp32 (default)\n"
    "                                              or rounded to bf16 (an HDF5 float type of its own)\n"
    "       trainer ckpt export PATH --format hf --output DIR [--dtype fp32|bf16] [--shard-mb N]\n"
    "                                              a Hugging Face model directory: config.json and\n"
    "                                              model.safetensors (shards of N MB, default 5000, with\n"
    "                                              an index past that); from_pretrained(DIR) loads it\n"
    "  PATH: a step directory (run/checkpoints/step_00000100), a checkpoint directory\n"
    "  (its `latest`, else its newest step) or its `latest` file. Exit 4 when the\n"
    "  checkpoint is broken or PATH is not a checkpoint, or the export cannot be written.\n"
    "  --output never goes inside a checkpoint directory, and replaces an existing file\n"
    "  only when it is an earlier HDF5 export (--force: any file). Exit 2 otherwise.\n";


std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " x ") + std::to_string(x);
  return s;
}

// The checkpoint's own recipe: the model's hyperparameters, where its data was.
Recipe recipe_of_checkpoint(const std::string& dir) {
  try {
    return load_recipe(dir + "/recipe.toml", {}, 0, false);
  } catch (const UserError& e) {
    throw CheckpointError(dir + "/recipe.toml: the checkpoint's recipe cannot be read: " + e.what());
  }
}

// The tokenizer's special ids for the export's config (model/text_ends.h);
// none when it is unknown or defines none, which *note says.
TextEnds special_ids(const std::string& spec, std::string* note) {
  if (spec.empty()) return {};
  auto add = [&](const std::string& s) { *note += (note->empty() ? "" : "; ") + s; };
  try {
    const TextEnds ends = make_tokenizer(spec, tokenizer_dir())->ends;
    if (!ends.eos) add("tokenizer \"" + spec + "\" defines no end-of-text token: config.json says bos/eos null "
                       "(a generator needs another stop condition)");
    return ends;
  } catch (const UserError& e) {
    add(std::string("config.json names no bos/eos ids: the tokenizer cannot be loaded: ") + e.what());
    return {};
  }
}

int cmd_export(const std::string& dir, int argc, char** argv) {
  std::string out, dtype = "fp32", format = "h5";
  double shard_mb = 5000;
  bool force = false;
  for (int i = 2; i < argc; i++) {
    const bool has = i + 1 < argc;
    if (!std::strcmp(argv[i], "--output") && has) out = argv[++i];
    else if (!std::strcmp(argv[i], "--force")) force = true;
    else if (!std::strcmp(argv[i], "--dtype") && has) dtype = argv[++i];
    else if (!std::strcmp(argv[i], "--format") && has) format = argv[++i];
    else if (!std::strcmp(argv[i], "--shard-mb") && has) shard_mb = option_number("--shard-mb", argv[++i], 0, 1e8, true);
    else throw RecipeError(std::string("ckpt export: unexpected argument \"") + argv[i] + "\"\n" + kCkptUsage);
  }
  if (out.empty()) throw RecipeError(std::string("ckpt export needs --output\n") + kCkptUsage);
  if (dtype != "fp32" && dtype != "bf16")
    throw RecipeError("ckpt export --dtype must be fp32 or bf16, got \"" + dtype + "\"\n" + kCkptUsage);
  if (format != "h5" && format != "hf")
    throw RecipeError("ckpt export --format must be h5 or hf, got \"" + format + "\"\n" + kCkptUsage);
  if (format == "h5") check_output_path(out, "HDF5 export", force, is_hf_h5_export);
  else check_outside_checkpoints(out, "Hugging Face export");  // export_hf_dir wants a new or empty directory
  read_manifest(dir, true);
  const Recipe rec = recipe_of_checkpoint(dir);
  const ModelConfig& m = rec.model;
  const DType dt = dtype == "bf16" ? DType::BF16 : DType::F32;
  // The tokenizer of the run's data, as the checkpoint records it
  // (data.tokenizer; older checkpoints: data_info.json beside the shards
  // now): its special ids go into config.json, its files beside a Hugging
  // Face export.
  std::string spec = rec.data.tokenizer, note;
  try {
    if (spec.empty() && !rec.data.train.empty()) {
      spec = recorded_tokenizer(rec.data.train.front().path);
      if (!spec.empty())
        note = "the checkpoint records no tokenizer (written before data.tokenizer): took " + spec +
               " from the data_info.json beside its training data as it is now";
    }
    if (spec.empty())
      note = "no data_info.json beside the run's training data: the tokenizer is unknown, so no tokenizer files "
             "are written and config.json names no bos/eos ids (null)";
  } catch (const UserError& e) {
    note = std::string("the run's tokenizer is unknown (") + e.what() + "): no tokenizer files, no bos/eos ids";
  }
  const TextEnds ends = special_ids(spec, &note);
  if (format == "h5") {
    export_hf(assemble_checkpoint(dir), m, out, dt, ends);
    std::printf("exported %s to %s (%s)\n", dir.c_str(), out.c_str(), dtype.c_str());
    if (!note.empty()) std::printf("note: %s\n", note.c_str());
    return 0;
  }
  auto tokenizer = [&](const std::string& into) {
    if (spec.empty()) return std::vector<std::string>{};
    try {
      return write_hf_tokenizer(spec, tokenizer_dir(), into, m.seq_len, &note);
    } catch (const UserError& e) {
      note = std::string("tokenizer files not written: ") + e.what();
    }
    return std::vector<std::string>{};
  };
  const std::vector<std::string> files =
      export_hf_dir(assemble_checkpoint(dir), m, out, dt, (size_t)(shard_mb * kMiB), ends, tokenizer);
  std::printf("exported %s to %s (%s, %s):", dir.c_str(), out.c_str(), arch_name(m.arch), dtype.c_str());
  for (const auto& f : files) std::printf(" %s", f.c_str());
  std::printf("\nload it with transformers.AutoModelForCausalLM.from_pretrained(\"%s\")\n", out.c_str());
  if (!note.empty()) std::printf("note: %s\n", note.c_str());
  return 0;
}

// inspect, verify or export one step directory.
int ckpt_command(const std::string& cmd, const std::string& dir, int argc, char** argv) {
  if (cmd == "inspect") {
    const TrainingState st = read_manifest(dir, false);
    std::printf("%s: step %ld, %llu samples consumed, AdamW step %ld, saved as dp %d x pp %d x tp %d by trainer %s\n",
                dir.c_str(), st.step, (unsigned long long)st.samples, st.adam_steps, st.dp, st.pp, st.tp,
                manifest_version(dir).c_str());
    try {
      if (const std::string from = recipe_of_checkpoint(dir).checkpoint.init_from; !from.empty())
        std::printf("  weights first loaded from the Hugging Face model %s (checkpoint.init_from)\n", from.c_str());
    } catch (const UserError&) {
      // A recipe.toml this trainer cannot read: inspect shows the rest.
    }
    for (const ManifestFile& f : manifest_files(dir))
      std::printf("  file %-14s %10zu bytes  crc32 %08x\n", f.name.c_str(), f.bytes, f.crc);
    std::map<std::string, std::pair<std::vector<int>, int>> tensors;  // shape, pieces
    for (const ManifestFile& f : manifest_files(dir)) {
      if (f.name.size() < 3 || f.name.substr(f.name.size() - 3) != ".h5") continue;
      H5File h(dir + "/" + f.name, H5File::Read);
      for (const std::string& n : h.list("param")) {
        auto& e = tensors[n];
        e.first = h.get_attr("param/" + n, "global_shape");
        e.second++;
      }
    }
    for (const auto& [name, e] : tensors)
      std::printf("  tensor %-32s %-14s in %d piece(s)\n", name.c_str(), join(e.first).c_str(), e.second);
    return 0;
  }
  if (cmd == "verify") {
    read_manifest(dir, true);
    const auto t = assemble_checkpoint(dir);
    std::printf("%s: ok (%zu tensors complete, every checksum matches)\n", dir.c_str(), t.size());
    return 0;
  }
  return cmd_export(dir, argc, argv);
}

}  // namespace

int cmd_ckpt(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "-h")) {
    std::fputs(kCkptUsage, argc < 2 && !(argc == 1 && argv[0][0] == '-') ? stderr : stdout);
    return argc < 2 && !(argc == 1 && argv[0][0] == '-') ? kExitUsage : 0;
  }
  const std::string cmd = argv[0];
  if (cmd != "inspect" && cmd != "verify" && cmd != "export")
    throw RecipeError("ckpt: unknown subcommand \"" + cmd + "\"\n" + kCkptUsage);
  // A live run with checkpoint.keep may prune the step directory while it
  // is read: that is said as such (not "not committed"), and when the path
  // named the checkpoint directory or `latest`, the newest one is read instead.
  std::string dir = find_checkpoint(argv[1]);
  for (int attempt = 0;; attempt++) {
    try {
      return ckpt_command(cmd, dir, argc, argv);
    } catch (const CheckpointError&) {
      // Its manifest was there when it was found; gone now (the pruning
      // removes it with the rest): the directory was removed under us.
      std::error_code ec;
      if (std::filesystem::exists(dir + "/manifest", ec)) throw;
      std::string newest;
      try {
        newest = find_checkpoint(argv[1]);
      } catch (const UserError&) {
      }
      if (newest.empty() || newest == dir || attempt == 4)
        throw CheckpointError(dir + " was removed while it was read (a live run's checkpoint.keep prunes older "
                              "checkpoints); name the checkpoint directory to read the newest");
      std::fprintf(stderr, "note: %s was removed while it was read (pruned by a live run); reading the newest\n",
                   dir.c_str());
      dir = newest;
    }
  }
}

}  // namespace trainer
