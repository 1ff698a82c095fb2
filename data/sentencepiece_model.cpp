#include "data/sentencepiece_model.h"

#include <cstdint>
#include <cstring>

#include "runtime/errors.h"

namespace trainer {

namespace {

// Protobuf's wire format: each field is a varint key (number << 3 | wire
// type) and a value: a varint (0), 8 bytes (1), a length and that many bytes
// (2) or 4 bytes (5).
class WireReader {
 public:
  WireReader(std::string_view bytes, const std::string& what) : b_(bytes), what_(what) {}
  bool done() const { return at_ >= b_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= b_.size()) fail("a varint runs past the end");
      const auto c = (unsigned char)b_[at_++];
      v |= uint64_t(c & 0x7F) << shift;
      if (!(c & 0x80)) return v;
    }
    fail("a varint longer than 10 bytes");
  }
  // The next field: its number and wire type; value() / bytes() / fixed32() / skip() read its value.
  std::pair<uint32_t, int> key() {
    const uint64_t k = varint();
    return {uint32_t(k >> 3), int(k & 7)};
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > b_.size() - at_) fail("a field runs past the end");
    const std::string_view v = b_.substr(at_, n);
    at_ += n;
    return v;
  }
  float fixed32() {
    if (b_.size() - at_ < 4) fail("a fixed32 runs past the end");
    float f;
    std::memcpy(&f, b_.data() + at_, 4);  // little-endian, as x86 and ARM Linux are
    at_ += 4;
    return f;
  }
  void skip(int wire) {
    if (wire == 0) varint();
    else if (wire == 2) bytes();
    else if (wire == 1 || wire == 5) {
      const size_t n = wire == 1 ? 8 : 4;
      if (b_.size() - at_ < n) fail("a fixed field runs past the end");
      at_ += n;
    } else fail("wire type " + std::to_string(wire) + " (groups or unknown)");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw DataError(what_ + ": not a SentencePiece model (" + why + " at byte " + std::to_string(at_) + ")");
  }

 private:
  std::string_view b_;
  const std::string& what_;
  size_t at_ = 0;
};

SentencePieceModel::Piece read_piece(std::string_view msg, const std::string& what) {
  SentencePieceModel::Piece p;
  WireReader r(msg, what);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 1 && wire == 2) p.text = std::string(r.bytes());
    else if (field == 2 && wire == 5) p.score = r.fixed32();
    else if (field == 3 && wire == 0) {
      const uint64_t t = r.varint();
      if (t < 1 || t > 6) r.fail("piece type " + std::to_string(t));
      p.kind = SentencePieceModel::Kind(t);
    } else r.skip(wire);
  }
  return p;
}

}  // namespace

SentencePieceModel parse_sentencepiece_model(std::string_view proto, const std::string& what) {
  SentencePieceModel m;
  WireReader r(proto, what);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 1 && wire == 2) {
      m.pieces.push_back(read_piece(r.bytes(), what));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      WireReader t(r.bytes(), what);
      while (!t.done()) {
        const auto [f, w] = t.key();
        if (f == 3 && w == 0) m.bpe = t.varint() == 2;  // ModelType: UNIGRAM 1, BPE 2, WORD 3, CHAR 4
        else if (f == 35 && w == 0) m.byte_fallback = t.varint() != 0;
        else t.skip(w);
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      WireReader n(r.bytes(), what);
      while (!n.done()) {
        const auto [f, w] = n.key();
        if (f == 1 && w == 2) m.normalizer = std::string(n.bytes());
        else if (f == 3 && w == 0) m.add_dummy_prefix = n.varint() != 0;
        else if (f == 4 && w == 0) m.remove_extra_whitespaces = n.varint() != 0;
        else if (f == 5 && w == 0) m.escape_whitespaces = n.varint() != 0;
        else n.skip(w);
      }
    } else {
      r.skip(wire);
    }
  }
  if (m.pieces.empty()) r.fail("no pieces");
  return m;
}

}  // namespace trainer
