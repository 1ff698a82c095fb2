// `trainer data prepare`: text files -> byte-level token shards.
#include <cstdio>
#include <cstring>
#include <string>

#include "app/commands.h"
#include "data/prepare.h"
#include "runtime/errors.h"

namespace trainer {

namespace {
const char* kDataUsage =
    "usage: trainer data prepare --input FILE_OR_DIR [FILE_OR_DIR ...] --output DIR\n"
    "                            [--val-fraction F] [--overwrite]\n"
    "  Reads the files (directories recursively, in sorted order), encodes their\n"
    "  bytes as tokens 0..255 and writes DIR/train_NNNNNN.bin and DIR/val_000000.bin\n"
    "  in llm.c's shard format. The last F of the text (default 0.1) is validation.\n"
    "  A DIR that already holds shards is refused unless --overwrite is given, which\n"
    "  removes the old train_*.bin / val_*.bin set before writing the new one.\n";
}

int cmd_data(int argc, char** argv) {
  if (argc < 1 || std::strcmp(argv[0], "prepare") != 0) {
    if (argc >= 1 && (!std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "-h"))) {
      std::fputs(kDataUsage, stdout);
      return 0;
    }
    std::fputs(kDataUsage, stderr);
    return kExitUsage;
  }
  PrepareConfig cfg;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kDataUsage, stdout);
      return 0;
    } else if (a == "--input") {
      while (i + 1 < argc && argv[i + 1][0] != '-') cfg.inputs.push_back(argv[++i]);
    } else if (a == "--output" && i + 1 < argc) {
      cfg.output_dir = argv[++i];
    } else if (a == "--overwrite") {
      cfg.overwrite = true;
    } else if (a == "--val-fraction" && i + 1 < argc) {
      char* end = nullptr;
      cfg.val_fraction = std::strtod(argv[++i], &end);
      if (!end || *end) throw RecipeError(std::string("--val-fraction: not a number: ") + argv[i]);
    } else {
      throw RecipeError("data prepare: unexpected argument \"" + a + "\"\n" + kDataUsage);
    }
  }
  if (cfg.inputs.empty() || cfg.output_dir.empty())
    throw RecipeError(std::string("data prepare needs --input and --output\n") + kDataUsage);
  const PrepareResult r = prepare_bytes(cfg);
  for (const std::string& f : r.empty_files) std::fprintf(stderr, "warning: %s is empty (0 bytes): skipped\n", f.c_str());
  if (r.removed_shards) std::printf("removed the %zu shard file(s) already in %s (--overwrite)\n", r.removed_shards, cfg.output_dir.c_str());
  std::printf("prepared %zu files: %zu train tokens in %zu shard(s), %zu val tokens -> %s\n",
              r.files, r.train_tokens, r.train_shards.size(), r.val_tokens,
              cfg.output_dir.c_str());
  return 0;
}

}  // namespace trainer
