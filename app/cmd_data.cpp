// `trainer data prepare`: text files -> token shards (data/prepare.h).
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "app/environment.h"
#include "app/commands.h"
#include "app/recipe_args.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "runtime/errors.h"

namespace trainer {

namespace {
const char* kDataUsage =
    "usage: trainer data prepare --input FILE_OR_DIR [FILE_OR_DIR ...] --output DIR [options]\n"
    "       trainer data inspect FILE [FILE ...] [--head N]\n"
    "  inspect: each token file's format, token and document counts and largest id\n"
    "  (and its first N ids); a Megatron dataset is named by its prefix, .bin or .idx.\n"
    "prepare:\n"
    "  Tokenizes the files (directories recursively, in sorted order) and writes\n"
    "  DIR/train_NNNNNN and DIR/val_NNNNNN token files plus DIR/data_info.json.\n"
    "  A text file is one document; a .jsonl/.ndjson file holds one document a line;\n"
    "  either may be gzip-compressed (.gz).\n"
    "  --tokenizer SPEC      bytes (default) | gpt2[:RANKS_FILE] | llama3[:RANKS_FILE] |\n"
    "                        sentencepiece:MODEL_FILE | DESCRIPTION.json (docs/DATA.md)\n"
    "  --json-key KEY        the document's field in JSONL lines (default text)\n"
    "  --special-tokens P    text that spells a special token (\"<|endoftext|>\"): error\n"
    "                        (default, as tiktoken: the file and byte named), text (encoded\n"
    "                        as ordinary text), special (as the token, as the exported\n"
    "                        Hugging Face tokenizer does)\n"
    "  --output-format F     llmc (default: llm.c shards, uint16, or llm.c's uint32\n"
    "                        version 7 past 65536 ids) | megatron (.bin + .idx)\n"
    "  --shard-tokens N      tokens per file (default 100000000)\n"
    "  --val-fraction F      the last F of the tokens is validation (default 0.1)\n"
    "  --doc-start ID|none   token before every document (default: the tokenizer's:\n"
    "                        gpt2 50256 as llm.c, llama3 128000, sentencepiece its bos)\n"
    "  --doc-end ID|none     token after every document (default: bytes \\n, else none)\n"
    "  --threads N           tokenizer threads (default: one per core)\n"
    "  --overwrite           replace the token files already in DIR (else refused)\n";

std::optional<int64_t> mark_arg(const std::string& opt, const char* v) {
  if (!std::strcmp(v, "none")) return -1;
  return option_integer(opt, v, 0, UINT32_MAX);  // a token id (the widest shards hold 32 bits)
}

long long count_arg(const std::string& opt, const char* v, long long hi) { return option_integer(opt, v, 1, hi); }

PrepareConfig parse(int argc, char** argv) {
  PrepareConfig cfg;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--input") {
      while (i + 1 < argc && argv[i + 1][0] != '-') cfg.inputs.push_back(argv[++i]);
    } else if (a == "--output" && has) {
      cfg.output_dir = argv[++i];
    } else if (a == "--overwrite") {
      cfg.overwrite = true;
    } else if (a == "--val-fraction" && has) {
      cfg.val_fraction = option_number(a, argv[++i], 0, 1);
    } else if (a == "--tokenizer" && has) {
      cfg.tokenizer = argv[++i];
    } else if (a == "--json-key" && has) {
      cfg.json_key = argv[++i];
    } else if (a == "--special-tokens" && has) {
      if (!parse_special_text(argv[++i], &cfg.special_text))
        throw RecipeError(std::string("--special-tokens: error, text or special, got ") + argv[i]);
    } else if (a == "--output-format" && has) {
      const std::string f = argv[++i];
      if (f != "llmc" && f != "megatron") throw RecipeError("--output-format: llmc or megatron, got " + f);
      cfg.format = f == "llmc" ? ShardFormat::Llmc : ShardFormat::Megatron;
    } else if (a == "--shard-tokens" && has) {
      cfg.shard_tokens = (size_t)count_arg(a, argv[++i], 1LL << 40);
    } else if (a == "--threads" && has) {
      cfg.threads = (int)count_arg(a, argv[++i], 4096);
    } else if (a == "--doc-start" && has) {
      cfg.doc_start = mark_arg(a, argv[++i]);
    } else if (a == "--doc-end" && has) {
      cfg.doc_end = mark_arg(a, argv[++i]);
    } else {
      throw RecipeError("data prepare: unexpected argument \"" + a + "\"\n" + kDataUsage);
    }
  }
  if (cfg.inputs.empty() || cfg.output_dir.empty())
    throw RecipeError(std::string("data prepare needs --input and --output\n") + kDataUsage);
  return cfg;
}

// One line, rewritten in place, on a terminal only (logs stay clean).
void show_progress(const PrepareProgress& p) {
  std::fprintf(stderr, "\r%.1f of %.1f MB read | %llu documents | %llu tokens | %.1f MB/s | %.0f s left   ",
               p.bytes_read / 1e6, p.total_bytes / 1e6, (unsigned long long)p.documents, (unsigned long long)p.tokens,
               p.mb_per_s(), p.seconds_left());
  std::fflush(stderr);
}
int cmd_inspect(int argc, char** argv) {
  long long head = 0;
  std::vector<std::string> files;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--head") && i + 1 < argc) head = count_arg("--head", argv[++i], LLONG_MAX);
    else if (argv[i][0] == '-') throw RecipeError(std::string("data inspect: unexpected argument \"") + argv[i] + "\"");
    else files.push_back(argv[i]);
  }
  if (files.empty()) throw RecipeError(std::string("data inspect needs a file\n") + kDataUsage);
  for (const std::string& f : expand_paths(files)) {
    const TokenShard s(f);
    size_t at = 0;
    const uint32_t top = s.size() ? s.max_token(&at) : 0;
    std::printf("%s: %s, %zu tokens", f.c_str(), s.describe().c_str(), s.size());
    if (s.documents()) std::printf(", %zu documents", s.documents());
    if (s.size()) std::printf(", largest id %u (token %zu)", top, at);
    std::printf("\n");
    if (head > 0) {
      for (size_t i = 0; i < std::min<size_t>((size_t)head, s.size()); i++) std::printf(i ? " %u" : "%u", s.token(i));
      std::printf("\n");
    }
  }
  return 0;
}
}  // namespace

int cmd_data(int argc, char** argv) {
  if (argc >= 1 && !std::strcmp(argv[0], "inspect")) return cmd_inspect(argc, argv);
  if (argc < 1 || std::strcmp(argv[0], "prepare") != 0) {
    if (argc >= 1 && (!std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "-h"))) {
      std::fputs(kDataUsage, stdout);
      return 0;
    }
    std::fputs(kDataUsage, stderr);
    return kExitUsage;
  }
  for (int i = 1; i < argc; i++)  // help wins over any other argument
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::fputs(kDataUsage, stdout);
      return 0;
    }
  PrepareConfig cfg = parse(argc, argv);
  cfg.tokenizer_dir = tokenizer_dir();
  const bool tty = ::isatty(STDERR_FILENO);
  if (tty) cfg.progress = show_progress;
  const PrepareResult r = prepare_tokens(cfg);
  if (tty) std::fputs("\n", stderr);
  for (const std::string& f : r.empty_files) std::fprintf(stderr, "warning: %s is empty (0 bytes): skipped\n", f.c_str());
  if (r.replaced_bytes)
    std::fprintf(stderr, "warning: %zu bytes were not valid UTF-8 and were each encoded as U+FFFD\n", r.replaced_bytes);
  if (r.removed_shards) std::printf("removed the %zu file(s) already in %s (--overwrite)\n", r.removed_shards, cfg.output_dir.c_str());
  std::printf("prepared %zu files, %zu documents: %zu train tokens in %zu shard(s), %zu val tokens -> %s\n", r.files,
              r.documents, r.train_tokens, r.train_shards.size(), r.val_tokens, cfg.output_dir.c_str());
  const double tokens = (double)(r.train_tokens + r.val_tokens);
  std::printf("tokenizer %s: %.3f tokens per byte, %zu of %u ids used (%.1f%%) | %.1f MB in %.1f s (%.1f MB/s)\n",
              r.tokenizer.c_str(), tokens / std::max<double>(1, (double)r.text_bytes), r.distinct_ids, r.vocab_size,
              100.0 * r.distinct_ids / r.vocab_size, r.text_bytes / 1e6, r.seconds,
              r.mb_per_s());
  const uint32_t padded = (r.vocab_size + 127) / 128 * 128;
  std::printf("train with model.vocab_size >= %u (%u, a multiple of 128, suits tensor parallelism)\n", r.vocab_size,
              padded);
  return 0;
}

}  // namespace trainer
