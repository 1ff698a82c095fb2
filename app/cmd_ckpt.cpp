// `trainer ckpt inspect|verify|export`: look into checkpoints without MPI.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "app/commands.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hdf5_tensors.h"
#include "ckpt/hf_export.h"
#include "runtime/errors.h"

namespace trainer {

namespace {

const char* kCkptUsage =
    "usage: trainer ckpt inspect PATH              layout, step, files and tensors\n"
    "       trainer ckpt verify PATH               every checksum, and every tensor complete\n"
    "       trainer ckpt export PATH --output F.h5 [--dtype fp32|bf16]\n"
    "                                              one HDF5 file, Hugging Face names; fp32 (default)\n"
    "                                              or rounded to bf16 (an HDF5 float type of its own)\n"
    "  PATH: a step directory (run/checkpoints/step_00000100), a checkpoint directory\n"
    "  (its `latest`, else its newest step) or its `latest` file. Exit 4 when the\n"
    "  checkpoint is broken or PATH is not a checkpoint, or the export cannot be written.\n";


std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " x ") + std::to_string(x);
  return s;
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
  const std::string dir = find_checkpoint(argv[1]);
  if (cmd == "inspect") {
    const TrainingState st = read_manifest(dir, false);
    std::printf("%s: step %ld, %llu samples consumed, AdamW step %ld, saved as dp %d x pp %d x tp %d by trainer %s\n",
                dir.c_str(), st.step, (unsigned long long)st.samples, st.adam_steps, st.dp, st.pp, st.tp,
                manifest_version(dir).c_str());
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
  if (cmd == "export") {
    std::string out, dtype = "fp32";
    for (int i = 2; i < argc; i++) {
      if (!std::strcmp(argv[i], "--output") && i + 1 < argc) out = argv[++i];
      else if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) dtype = argv[++i];
      else throw RecipeError(std::string("ckpt export: unexpected argument \"") + argv[i] + "\"\n" + kCkptUsage);
    }
    if (out.empty()) throw RecipeError(std::string("ckpt export needs --output FILE.h5\n") + kCkptUsage);
    if (dtype != "fp32" && dtype != "bf16")
      throw RecipeError("ckpt export --dtype must be fp32 or bf16, got \"" + dtype + "\"\n" + kCkptUsage);
    read_manifest(dir, true);
    export_hf(assemble_checkpoint(dir), out, dtype == "bf16" ? DType::BF16 : DType::F32);
    std::printf("exported %s to %s (%s)\n", dir.c_str(), out.c_str(), dtype.c_str());
    return 0;
  }
  throw RecipeError("ckpt: unknown subcommand \"" + cmd + "\"\n" + kCkptUsage);
}

}  // namespace trainer
