#pragma once
// `trainer data prepare`: text -> token shards. Inputs (files and
// directories, sorted; text, JSONL, gzip) stream through a reader thread,
// several tokenizer threads and, in input order, a writer that appends the
// ids (with each document's start/end marks) to a temporary token stream in
// the output directory. The last val_fraction of the stream becomes the
// validation set, the rest train shards of shard_tokens; all go to temporary
// names and are renamed into place only when every file is written, with
// DIR/data_info.json recording the tokenizer and its vocabulary.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/shard_writer.h"
#include "data/special_text.h"

namespace trainer {

struct PrepareProgress {
  uint64_t bytes_read = 0, total_bytes = 0;  // input files on disk
  uint64_t documents = 0, tokens = 0;
  double seconds = 0;
  // MB (10^6 bytes) read per second so far, and the seconds left at that rate (0: unknown).
  double mb_per_s() const { return seconds > 0 ? bytes_read / 1e6 / seconds : 0; }
  double seconds_left() const {
    return mb_per_s() > 0 && total_bytes > bytes_read ? (total_bytes - bytes_read) / 1e6 / mb_per_s() : 0;
  }
};

struct PrepareConfig {
  std::vector<std::string> inputs;  // files or directories
  std::string output_dir;
  double val_fraction = 0.1;
  size_t shard_tokens = 100'000'000;  // tokens per train shard file
  // The output directory may hold shards only with overwrite, which removes
  // that whole set first (a smaller new set would otherwise leave old shards
  // that a train_*.bin glob mixes in).
  bool overwrite = false;
  std::string tokenizer = "bytes";  // make_tokenizer's SPEC
  std::string tokenizer_dir;        // make_tokenizer's search_dir ($TRAINER_TOKENIZER_DIR)
  std::string json_key = "text";
  SpecialText special_text = SpecialText::Error;  // text spelling a special token (data/special_text.h)
  ShardFormat format = ShardFormat::Llmc;
  int threads = 0;  // tokenizer threads; 0: one per core
  // Replace the tokenizer's document marks (-1: none).
  std::optional<int64_t> doc_start, doc_end;
  std::function<void(const PrepareProgress&)> progress;  // called a few times a second
};

struct PrepareResult {
  size_t files = 0, documents = 0, train_tokens = 0, val_tokens = 0;
  uint64_t input_bytes = 0, text_bytes = 0;
  size_t distinct_ids = 0, replaced_bytes = 0;  // ids used; invalid UTF-8 bytes replaced by U+FFFD
  uint32_t vocab_size = 0;
  std::string tokenizer;
  double seconds = 0;
  std::vector<std::string> empty_files;  // inputs with no bytes (skipped)
  size_t removed_shards = 0;             // old shards removed (overwrite)
  std::vector<std::string> train_shards, val_shards;
  // Text MB (10^6 bytes) tokenized per second.
  double mb_per_s() const { return text_bytes / 1e6 / std::max(1e-9, seconds); }
};

PrepareResult prepare_tokens(const PrepareConfig& cfg);

// What `data prepare` records beside its shards (DIR/data_info.json) and the
// loader checks against model.vocab_size.
constexpr const char* kDataInfoFile = "data_info.json";

}  // namespace trainer
