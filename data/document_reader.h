#pragma once
// Reads `data prepare` inputs as a stream of documents, never a whole input
// at once: a text file is one document; a JSONL file (.jsonl, .ndjson) holds
// one document a line, the string under json_key; either may be gzip
// compressed (.gz). Documents of tokenizers that allow it are handed out in
// pieces of about piece_bytes, cut only where the tokens do not change.
#include <cstdint>
#include <string>
#include <vector>

#include <zlib.h>

namespace trainer {

struct TextPiece {
  std::string text;
  bool doc_start = false, doc_end = false;
  // Where the text is, for messages: the file and the byte of the file's
  // (uncompressed) text the piece starts at, or "file:line" of a JSONL document.
  std::string where;
  uint64_t offset = 0;
};

struct ReaderOptions {
  std::string json_key = "text";
  bool cut_at_lines = true;             // Tokenizer::splits_at_lines()
  size_t piece_bytes = 1 << 20;         // target piece size when cutting
  size_t max_document_bytes = 1ull << 30;  // a longer uncut document is refused
};

class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, ReaderOptions opt);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  bool next(TextPiece& out);  // false at the end of the last file
  uint64_t bytes_read() const { return done_bytes_ + (gz_ ? (uint64_t)gzoffset(gz_) : 0); }
  uint64_t total_bytes() const { return total_bytes_; }  // on disk (compressed for .gz)
  const std::vector<std::string>& empty_files() const { return empty_; }

 private:
  bool open_next();
  bool fill();  // reads more bytes into buf_; false at end of file
  bool next_json(TextPiece& out);
  bool next_text(TextPiece& out);
  void close();

  std::vector<std::string> files_;
  ReaderOptions opt_;
  size_t file_ = 0;
  gzFile gz_ = nullptr;
  bool json_ = false, eof_ = false, started_ = false;
  std::string buf_;
  size_t line_ = 0;  // JSONL line number of the next line
  uint64_t piece_at_ = 0;  // text bytes of this file handed out in pieces so far
  uint64_t done_bytes_ = 0, total_bytes_ = 0, file_text_bytes_ = 0;
  std::vector<std::string> empty_;
};

// Files under the inputs: directories recursively in sorted order, each real
// file once. Throws DataError for a missing input or when none is readable.
std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs);

}  // namespace trainer
