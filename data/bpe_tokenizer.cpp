#include "data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <queue>

#include "runtime/errors.h"
#include "runtime/regular_file.h"

namespace trainer {

namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

// Base64 of one ranks-file line (a dozen lines of code: no library needed).
bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else if (c == '=') break;
    else return false;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back((char)((acc >> bits) & 0xff));
    }
  }
  return true;
}

void* compile(const std::string& name, const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE at = 0;
  // UCP: \s, \p{L} and \p{N} are Unicode's, as in Rust's regex that tiktoken
  // uses (\s includes U+0085 in both). DOLLAR_ENDONLY: "$" is the end of the
  // text, as in Rust (PCRE2 would also match before a final newline).
  const std::string& pat = pattern;
  pcre2_code* code = pcre2_compile((PCRE2_SPTR)pat.data(), pat.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &at, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw RecipeError("tokenizer " + name + ": bad pre-tokenizer pattern at character " + std::to_string(at) + ": " +
                      reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is unavailable
  return code;
}

class BpeEncoder : public TokenEncoder {
 public:
  explicit BpeEncoder(const BpeTokenizer& t)
      : t_(t), match_(pcre2_match_data_create_from_pattern((const pcre2_code*)t.regex(), nullptr)) {}
  ~BpeEncoder() override { pcre2_match_data_free(match_); }

  void encode(std::string_view text, std::vector<uint32_t>& out) override {
    const auto* code = (const pcre2_code*)t_.regex();
    PCRE2_SIZE pos = 0;
    while (pos < text.size()) {
      const int rc = pcre2_match(code, (PCRE2_SPTR)text.data(), text.size(), pos, PCRE2_NO_UTF_CHECK, match_, nullptr);
      if (rc < 0) break;  // no further piece (tiktoken skips text no alternative matches)
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_);
      if (ov[1] == ov[0]) {  // an empty match: step over one character
        pos = ov[1] + 1;
        while (pos < text.size() && ((unsigned char)text[pos] & 0xC0) == 0x80) pos++;
        continue;
      }
      piece(text.substr(ov[0], ov[1] - ov[0]), out);
      pos = ov[1];
    }
  }

 private:
  void piece(std::string_view p, std::vector<uint32_t>& out) {
    if (const int64_t r = t_.rank(p); r >= 0) {
      out.push_back((uint32_t)r);
      return;
    }
    auto it = cache_.find(std::string(p));
    if (it == cache_.end()) {
      if (cache_.size() >= 1u << 17) cache_.clear();  // bounded: a few MB
      std::vector<uint32_t> ids;
      t_.merge(p, ids);
      it = cache_.emplace(std::string(p), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }

  const BpeTokenizer& t_;
  pcre2_match_data* match_;
  std::unordered_map<std::string, std::vector<uint32_t>> cache_;
};

}  // namespace

BpeTokenizer::BpeTokenizer(const BpeSpec& spec) : pattern_(spec.pattern), specials_(spec.specials) {
  name_ = spec.name;
  marks = spec.marks;
  ends = spec.ends;
  if (const std::string why = not_regular_file(spec.ranks_file); !why.empty())
    throw DataError(spec.ranks_file + ": " + why);
  std::ifstream f(spec.ranks_file);
  if (!f) throw DataError(spec.ranks_file + ": cannot read the tokenizer's ranks file");
  std::vector<std::pair<std::string, uint32_t>> rows;
  std::string line, bytes;
  size_t total = 0;
  for (size_t n = 1; std::getline(f, line); n++) {
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    char* end = nullptr;
    const unsigned long r = sp == std::string::npos ? 0 : std::strtoul(line.c_str() + sp + 1, &end, 10);
    if (sp == std::string::npos || !end || *end || !decode_base64(std::string_view(line).substr(0, sp), bytes))
      throw DataError(spec.ranks_file + ": line " + std::to_string(n) +
                      " is not \"<base64 bytes> <rank>\" (a tiktoken ranks file)");
    rows.emplace_back(bytes, (uint32_t)r);
    total += bytes.size();
    vocab_ = std::max(vocab_, (uint32_t)r + 1);
  }
  if (rows.empty()) throw DataError(spec.ranks_file + ": no ranks in the file");
  arena_.reserve(total);  // string_views below point into it: no reallocation after this
  ranks_.reserve(rows.size());
  for (auto& [b, r] : rows) {
    const size_t at = arena_.size();
    arena_ += b;
    ranks_.emplace(std::string_view(arena_).substr(at, b.size()), r);
  }
  for (int b = 0; b < 256; b++)
    if (rank(std::string(1, (char)b)) < 0)
      throw DataError(spec.ranks_file + ": byte " + std::to_string(b) + " has no rank: not a byte-level BPE file");
  for (const auto& [text, id] : spec.specials) vocab_ = std::max(vocab_, id + 1);
  code_ = compile(name_, spec.pattern);
}

BpeTokenizer::~BpeTokenizer() { pcre2_code_free((pcre2_code*)code_); }

std::unique_ptr<TokenEncoder> BpeTokenizer::encoder() const { return std::make_unique<BpeEncoder>(*this); }

int64_t BpeTokenizer::rank(std::string_view bytes) const {
  const auto it = ranks_.find(bytes);
  return it == ranks_.end() ? -1 : (int64_t)it->second;
}

// tiktoken's rule: repeatedly merge the adjacent pair whose concatenation has
// the lowest rank (the leftmost on ties) until no pair has a rank. The pairs
// sit in a heap ordered by (rank, start), so a long piece (a run of spaces or
// symbols) costs n log n, not n^2.
void BpeTokenizer::merge(std::string_view p, std::vector<uint32_t>& out, uint32_t below) const {
  const size_t n = p.size();
  std::vector<size_t> next(n), prev(n);
  std::vector<uint32_t> pair(n, kNoRank), version(n, 0);
  for (size_t i = 0; i < n; i++) next[i] = i + 1, prev[i] = i - 1;  // prev[0] wraps: never read
  auto end_of = [&](size_t i) { return i < n ? next[i] : n; };
  auto pair_rank = [&](size_t i) -> uint32_t {
    if (i >= n || next[i] >= n) return kNoRank;
    const int64_t r = rank(p.substr(i, end_of(next[i]) - i));
    return r < 0 || (uint32_t)r >= below ? kNoRank : (uint32_t)r;
  };
  using Entry = std::tuple<uint32_t, size_t, uint32_t>;  // rank, start, version
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (size_t i = 0; i + 1 < n; i++)
    if ((pair[i] = pair_rank(i)) != kNoRank) heap.emplace(pair[i], i, 0);
  while (!heap.empty()) {
    const auto [r, i, v] = heap.top();
    heap.pop();
    if (v != version[i] || pair[i] != r) continue;  // stale
    const size_t j = next[i];  // j joins i
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    version[j] = kNoRank;  // j is gone
    pair[i] = pair_rank(i);
    if (pair[i] != kNoRank) heap.emplace(pair[i], i, ++version[i]);
    else ++version[i];
    if (i > 0) {
      const size_t h = prev[i];
      pair[h] = pair_rank(h);
      if (pair[h] != kNoRank) heap.emplace(pair[h], h, ++version[h]);
      else ++version[h];
    }
  }
  for (size_t i = 0; i < n; i = next[i]) out.push_back((uint32_t)rank(p.substr(i, next[i] - i)));
}

std::vector<std::pair<uint32_t, std::string_view>> BpeTokenizer::ranks() const {
  std::vector<std::pair<uint32_t, std::string_view>> out;
  for (const auto& [bytes, r] : ranks_) out.emplace_back(r, bytes);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace trainer
