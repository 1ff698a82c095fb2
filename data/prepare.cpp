#include "data/prepare.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/document_reader.h"
#include "data/tokenizer.h"
#include "runtime/elapsed.h"
#include "runtime/errors.h"

namespace fs = std::filesystem;

namespace trainer {

namespace {


// Shards of an earlier `data prepare` in dir (and their temporary files).
std::vector<fs::path> existing_shards(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const bool named = n.rfind("train_", 0) == 0 || n.rfind("val_", 0) == 0;
    auto ends = [&](const std::string& x) { return n.size() > x.size() && n.substr(n.size() - x.size()) == x; };
    const bool shard = ends(".bin") || ends(".idx") || ends(".bin.new") || ends(".idx.new") || ends(".bin.tmp");
    if ((named && shard) || n == kDataInfoFile) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The ids of all documents, in input order, in a temporary file of uint32
// (not memory: inputs may be far larger), with where each document starts
// when the output format records documents (8 bytes each).
class TokenStream {
 public:
  TokenStream(const std::string& path, uint32_t vocab, bool keep_starts)
      : path_(path), used_(vocab, 0), keep_starts_(keep_starts) {
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) throw DataError(path + ": cannot create: " + std::strerror(errno));
  }
  ~TokenStream() {
    if (f_) std::fclose(f_);
    if (map_) ::munmap(map_, bytes_);
    std::remove(path_.c_str());
  }
  void begin_document() {
    documents_++;
    if (keep_starts_) starts_.push_back(n_);
  }
  void add(const uint32_t* ids, size_t k) {
    for (size_t i = 0; i < k; i++) used_[ids[i]] = 1;
    if (k && std::fwrite(ids, 4, k, f_) != k)
      throw DataError(path_ + ": write failed: " + std::strerror(errno) + " (the output needs about 4 bytes a token)");
    n_ += k;
  }
  // Ends writing; the stream is then mapped for the shards to copy from.
  const uint32_t* finish() {
    const bool ok = std::fclose(f_) == 0;
    f_ = nullptr;
    if (!ok) throw DataError(path_ + ": write failed: " + std::strerror(errno));
    bytes_ = n_ * 4;
    if (!bytes_) return nullptr;
    const int fd = ::open(path_.c_str(), O_RDONLY);
    map_ = fd < 0 ? MAP_FAILED : ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (fd >= 0) ::close(fd);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      throw DataError(path_ + ": cannot map: " + std::strerror(errno));
    }
    return static_cast<const uint32_t*>(map_);
  }
  uint64_t size() const { return n_; }
  size_t documents() const { return documents_; }
  size_t distinct() const { return (size_t)std::count(used_.begin(), used_.end(), 1); }
  // Lengths of the document pieces that make up tokens [a, b).
  std::vector<uint64_t> pieces(uint64_t a, uint64_t b) const {
    std::vector<uint64_t> out;
    auto it = std::upper_bound(starts_.begin(), starts_.end(), a);
    uint64_t at = a;
    for (; at < b; ++it) {
      const uint64_t end = it == starts_.end() ? b : std::min<uint64_t>(*it, b);
      if (end > at) out.push_back(end - at);
      at = end;
    }
    return out;
  }

 private:
  std::string path_;
  FILE* f_ = nullptr;
  void* map_ = nullptr;
  uint64_t n_ = 0, bytes_ = 0;
  std::vector<uint64_t> starts_;
  std::vector<uint8_t> used_;
  bool keep_starts_;
  size_t documents_ = 0;
};

// Reader thread -> tokenizer threads -> the caller, in input order.
class TokenizePipeline {
 public:
  struct Done {
    std::vector<TextPiece> pieces;  // text cleared: only the document flags
    std::vector<std::vector<uint32_t>> ids;
    size_t text_bytes = 0, replaced = 0;
  };

  TokenizePipeline(const Tokenizer& tok, DocumentReader& reader, int threads, SpecialText special_text)
      : tok_(tok), reader_(reader), limit_((size_t)threads * 3 + 2), special_text_(special_text) {
    threads_.emplace_back([this] { guard([this] { read(); }); });
    for (int i = 0; i < threads; i++) threads_.emplace_back([this] { guard([this] { work(); }); });
  }
  ~TokenizePipeline() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // The next batch in input order; false when all are done.
  bool next(Done& out, const std::function<void()>& tick) {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (error_) std::rethrow_exception(error_);
      if (auto it = done_.find(next_); it != done_.end()) {
        out = std::move(it->second);
        done_.erase(it);
        next_++;
        cv_.notify_all();
        return true;
      }
      if (read_all_ && next_ == pushed_) return false;
      cv_.wait_for(lk, std::chrono::milliseconds(200));
      lk.unlock();
      tick();
      lk.lock();
    }
  }

 private:
  struct Job {
    uint64_t seq;
    std::vector<TextPiece> pieces;
  };
  void guard(const std::function<void()>& f) {
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
      cv_.notify_all();
    }
  }
  void read() {
    Job job{0, {}};
    size_t bytes = 0;
    TextPiece p;
    auto push = [&] {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || error_ || todo_.size() + done_.size() + busy_ < limit_; });
      job.seq = pushed_++;
      todo_.push_back(std::move(job));
      job = Job{0, {}};
      bytes = 0;
      cv_.notify_all();
    };
    while (!stopped() && reader_.next(p)) {
      bytes += p.text.size();
      job.pieces.push_back(std::move(p));
      p = TextPiece{};
      if (bytes >= (256u << 10)) push();
    }
    if (!job.pieces.empty()) push();
    std::lock_guard<std::mutex> lk(mu_);
    read_all_ = true;
    cv_.notify_all();
  }
  void work() {
    auto enc = tok_.encoder();
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || error_ || !todo_.empty(); });
        if (stop_ || error_) return;
        job = std::move(todo_.front());
        todo_.pop_front();
        busy_++;
      }
      Done d;
      for (TextPiece& p : job.pieces) {
        d.replaced += repair_utf8(p.text);
        d.text_bytes += p.text.size();
        d.ids.emplace_back();
        encode_text(*enc, tok_.specials(), special_text_, p.text, p.where, p.offset, d.ids.back());
        p.text = std::string();
      }
      d.pieces = std::move(job.pieces);
      std::lock_guard<std::mutex> lk(mu_);
      busy_--;
      done_.emplace(job.seq, std::move(d));
      cv_.notify_all();
    }
  }
  bool stopped() {
    std::lock_guard<std::mutex> lk(mu_);
    return stop_ || error_;
  }

  const Tokenizer& tok_;
  DocumentReader& reader_;
  const size_t limit_;  // batches in flight: bounds memory
  const SpecialText special_text_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> todo_;
  std::map<uint64_t, Done> done_;
  size_t busy_ = 0;
  uint64_t pushed_ = 0, next_ = 0;
  bool read_all_ = false, stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

void write_data_info(const std::string& path, const PrepareConfig& cfg, const Tokenizer& tok, const PrepareResult& r) {
  auto mark = [](const std::optional<uint32_t>& m) { return m ? nlohmann::json(*m) : nlohmann::json(nullptr); };
  auto names = [](const std::vector<std::string>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : v) a.push_back(fs::path(p).filename().string());
    return a;
  };
  const nlohmann::json j = {
      {"tokenizer", tok.name()}, {"tokenizer_spec", cfg.tokenizer}, {"vocab_size", tok.vocab_size()},
      {"doc_start", mark(tok.marks.start)}, {"doc_end", mark(tok.marks.end)},
      {"special_tokens", special_text_name(cfg.special_text)},
      {"format", cfg.format == ShardFormat::Llmc ? "llmc" : "megatron"}, {"documents", r.documents},
      {"train_tokens", r.train_tokens}, {"val_tokens", r.val_tokens}, {"train", names(r.train_shards)},
      {"val", names(r.val_shards)}};
  FILE* f = std::fopen((path + ".new").c_str(), "wb");
  const std::string text = j.dump(2) + "\n";
  const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
                  ::fsync(fileno(f)) == 0;
  if (f) std::fclose(f);
  if (!ok) throw DataError(path + ": write failed: " + std::strerror(errno));
}

void apply_marks(Tokenizer& tok, const PrepareConfig& cfg) {
  auto set = [&](std::optional<uint32_t>& m, const std::optional<int64_t>& v, const char* opt) {
    if (!v) return;
    if (*v >= (int64_t)tok.vocab_size())
      throw RecipeError(std::string(opt) + " " + std::to_string(*v) + " is not below the tokenizer's vocabulary size " +
                        std::to_string(tok.vocab_size()));
    m = *v < 0 ? std::nullopt : std::optional<uint32_t>((uint32_t)*v);
  };
  set(tok.marks.start, cfg.doc_start, "--doc-start");
  set(tok.marks.end, cfg.doc_end, "--doc-end");
}

}  // namespace

PrepareResult prepare_tokens(const PrepareConfig& cfg) {
  if (!(cfg.val_fraction >= 0 && cfg.val_fraction < 1))
    throw RecipeError("--val-fraction must be a number in [0, 1), got " + std::to_string(cfg.val_fraction));
  if (cfg.shard_tokens < 1) throw RecipeError("--shard-tokens must be at least 1");
  const auto t0 = Clock::now();
  PrepareResult res;
  const std::vector<fs::path> old = existing_shards(cfg.output_dir);
  if (!old.empty() && !cfg.overwrite)
    throw DataError(cfg.output_dir + " already holds token shards (" + old.front().filename().string() +
                    (old.size() > 1 ? " and " + std::to_string(old.size() - 1) + " more" : std::string()) +
                    "); writing a new set there would mix with them. Choose another --output, or add "
                    "--overwrite to remove the old set first.");
  std::unique_ptr<Tokenizer> tok = make_tokenizer(cfg.tokenizer, cfg.tokenizer_dir);
  apply_marks(*tok, cfg);
  const std::vector<std::string> files = collect_input_files(cfg.inputs);
  std::error_code ec;
  fs::create_directories(cfg.output_dir, ec);
  if (ec) throw DataError(cfg.output_dir + ": cannot create directory: " + ec.message());

  ReaderOptions ro;
  ro.json_key = cfg.json_key;
  ro.cut_at_lines = tok->splits_at_lines();
  DocumentReader reader(files, ro);
  TokenStream stream((fs::path(cfg.output_dir) / ".prepare_tokens.tmp").string(), tok->vocab_size(),
                     cfg.format == ShardFormat::Megatron);
  const int threads = cfg.threads > 0 ? cfg.threads : (int)std::max(1u, std::thread::hardware_concurrency());
  auto last = Clock::now();
  auto tick = [&](bool force) {
    if (!cfg.progress || (!force && Clock::now() - last < std::chrono::milliseconds(250))) return;
    last = Clock::now();
    cfg.progress({reader.bytes_read(), reader.total_bytes(), stream.documents(), stream.size(),
                  std::chrono::duration<double>(last - t0).count()});
  };
  {
    TokenizePipeline pipe(*tok, reader, threads, cfg.special_text);
    TokenizePipeline::Done d;
    while (pipe.next(d, [&] { tick(false); })) {
      for (size_t i = 0; i < d.pieces.size(); i++) {
        const TextPiece& p = d.pieces[i];
        if (p.doc_start) {
          stream.begin_document();
          if (tok->marks.start) stream.add(&*tok->marks.start, 1);
        }
        stream.add(d.ids[i].data(), d.ids[i].size());
        if (p.doc_end && tok->marks.end) stream.add(&*tok->marks.end, 1);
      }
      res.text_bytes += d.text_bytes;
      res.replaced_bytes += d.replaced;
      tick(false);
    }
  }
  tick(true);
  res.empty_files = reader.empty_files();
  res.files = files.size() - res.empty_files.size();
  res.documents = stream.documents();
  res.input_bytes = reader.total_bytes();
  res.distinct_ids = stream.distinct();
  res.vocab_size = tok->vocab_size();
  res.tokenizer = tok->name();
  if (stream.size() == 0)
    throw DataError("the --input files are all empty (0 bytes) or hold no documents: there is no text to make tokens from");

  const uint64_t n = stream.size();
  const uint64_t n_val = (uint64_t)(n * cfg.val_fraction), n_train = n - n_val;
  const uint32_t* ids = stream.finish();
  // The new set goes to temporary names first; only when all of it is
  // written does the old set (with --overwrite) make way for it.
  std::vector<std::string> written;
  auto write_split = [&](const char* split, uint64_t from, uint64_t to, std::vector<std::string>& list) {
    char name[64];
    for (uint64_t off = from, k = 0; off < to; off += cfg.shard_tokens, k++) {
      const uint64_t end = std::min<uint64_t>(to, off + cfg.shard_tokens);
      std::snprintf(name, sizeof(name), "%s_%06llu", split, (unsigned long long)k);
      const auto paths = write_shard(cfg.format, (fs::path(cfg.output_dir) / name).string(), ids + off, end - off,
                                     stream.pieces(off, end), tok->vocab_size());
      written.insert(written.end(), paths.begin(), paths.end());
      list.push_back(paths.front());
    }
  };
  const std::string info = (fs::path(cfg.output_dir) / kDataInfoFile).string();
  try {
    write_split("train", 0, n_train, res.train_shards);
    write_split("val", n_train, n, res.val_shards);
    res.train_tokens = n_train;
    res.val_tokens = n_val;
    write_data_info(info, cfg, *tok, res);
    written.push_back(info);
  } catch (const UserError&) {
    for (const std::string& w : written) fs::remove(w + ".new", ec);
    fs::remove(info + ".new", ec);
    throw;
  }
  for (const fs::path& p : old) {  // --overwrite: the old set goes as a whole
    if (!fs::remove(p, ec) || ec) throw DataError(p.string() + ": cannot remove: " + ec.message());
    res.removed_shards++;
  }
  for (const std::string& w : written)
    if (std::rename((w + ".new").c_str(), w.c_str()) != 0)
      throw DataError(w + ": cannot rename into place: " + std::strerror(errno));
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

}  // namespace trainer
