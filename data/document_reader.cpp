#include "data/document_reader.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "runtime/errors.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {
bool ends_with(const std::string& s, const std::string& x) {
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}
bool is_jsonl(std::string name) {
  if (ends_with(name, ".gz")) name.resize(name.size() - 3);
  return ends_with(name, ".jsonl") || ends_with(name, ".ndjson");
}
}  // namespace

std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  std::set<fs::path> seen;  // canonical paths, so GPL -> GPL-3 is read once
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    const fs::path canon = fs::canonical(p, ec);
    if (!ec && fs::is_regular_file(canon) && seen.insert(canon).second) files.push_back(p.string());
  };
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (!fs::exists(in, ec)) throw DataError(in + ": no such file or directory");
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> sub;
      for (const auto& e : fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink))
        sub.push_back(e.path());
      std::sort(sub.begin(), sub.end());
      for (const auto& p : sub) add(p);
    } else {
      add(in);
    }
  }
  if (files.empty()) throw DataError("no readable files among the --input paths");
  return files;
}

DocumentReader::DocumentReader(std::vector<std::string> files, ReaderOptions opt)
    : files_(std::move(files)), opt_(std::move(opt)) {
  for (const auto& f : files_) {
    std::error_code ec;
    total_bytes_ += fs::file_size(f, ec);
  }
}

DocumentReader::~DocumentReader() { close(); }

void DocumentReader::close() {
  if (!gz_) return;
  std::error_code ec;
  done_bytes_ += fs::file_size(files_[file_ - 1], ec);
  gzclose(gz_);
  gz_ = nullptr;
}

bool DocumentReader::open_next() {
  close();
  if (file_ >= files_.size()) return false;
  const std::string& f = files_[file_++];
  gz_ = gzopen(f.c_str(), "rb");  // reads plain files as they are
  if (!gz_) throw DataError(f + ": cannot read");
  gzbuffer(gz_, 1 << 20);
  json_ = is_jsonl(f);
  eof_ = started_ = false;
  buf_.clear();
  line_ = 1;
  file_text_bytes_ = 0;
  piece_at_ = 0;
  return true;
}

bool DocumentReader::fill() {
  if (eof_) return false;
  const size_t at = buf_.size();
  buf_.resize(at + (1 << 20));
  const int n = gzread(gz_, buf_.data() + at, 1 << 20);
  if (n < 0) {
    int code = 0;
    throw DataError(files_[file_ - 1] + ": read error at byte " + std::to_string(gzoffset(gz_)) + ": " +
                    gzerror(gz_, &code));
  }
  buf_.resize(at + (size_t)n);
  file_text_bytes_ += (size_t)n;
  if (n == 0) eof_ = true;
  return n > 0;
}

bool DocumentReader::next(TextPiece& out) {
  for (;;) {
    if (gz_ && (json_ ? next_json(out) : next_text(out))) return true;
    if (gz_ && file_text_bytes_ == 0) empty_.push_back(files_[file_ - 1]);
    if (!open_next()) return false;
  }
}

bool DocumentReader::next_json(TextPiece& out) {
  out.doc_start = false;
  for (;;) {
    size_t nl = buf_.find('\n');
    while (nl == std::string::npos && fill()) nl = buf_.find('\n');
    if (nl == std::string::npos && buf_.empty()) return false;
    const size_t end = nl == std::string::npos ? buf_.size() : nl;
    const std::string_view line(buf_.data(), end);
    const size_t here = line_++;
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
      try {
        const nlohmann::json j = nlohmann::json::parse(line);
        const auto it = j.find(opt_.json_key);
        if (it == j.end() || !it->is_string())
          throw DataError(files_[file_ - 1] + ":" + std::to_string(here) + ": no string \"" + opt_.json_key +
                          "\" in this JSON line (choose the key with --json-key)");
        out.text = it->get<std::string>();
        out.where = files_[file_ - 1] + ":" + std::to_string(here), out.offset = 0;
      } catch (const nlohmann::json::exception& e) {
        throw DataError(files_[file_ - 1] + ":" + std::to_string(here) + ": not a JSON object: " + e.what());
      }
      out.doc_start = out.doc_end = true;
    }
    buf_.erase(0, nl == std::string::npos ? buf_.size() : nl + 1);
    if (out.doc_start) return true;
  }
}

bool DocumentReader::next_text(TextPiece& out) {
  if (started_ && buf_.empty() && eof_) return false;
  // Read until there is a piece's worth with a safe place to cut it (or the
  // whole document, for tokenizers that cannot be cut).
  size_t cut = 0;
  while (!eof_) {
    if (opt_.cut_at_lines && buf_.size() >= opt_.piece_bytes && (cut = safe_cut(buf_)) > 0) break;
    if (buf_.size() > opt_.max_document_bytes)
      throw DataError(files_[file_ - 1] + ": more than " + std::to_string(opt_.max_document_bytes >> 20) +
                      " MB without a place to cut the document; split the text into JSONL documents");
    fill();
  }
  if (buf_.empty()) return false;  // an empty file: no document
  if (eof_) cut = buf_.size();
  out.text.assign(buf_, 0, cut);
  out.where = files_[file_ - 1], out.offset = piece_at_;
  piece_at_ += cut;
  buf_.erase(0, cut);
  out.doc_start = !started_;
  started_ = true;
  out.doc_end = buf_.empty() && eof_;
  return true;
}

}  // namespace trainer
