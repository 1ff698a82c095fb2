#include "runtime/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/errors.h"
#include "runtime/flight_recorder.h"
#include "runtime/host_name.h"

namespace trainer {

namespace {

struct Crc32cTable {
  uint32_t t[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
  }
};

uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

// Protobuf wire format: varints, tags (field << 3 | wire type).
void varint(std::string& s, uint64_t v) {
  for (; v >= 0x80; v >>= 7) s += (char)(v | 0x80);
  s += (char)v;
}
void tag(std::string& s, int field, int wire) { varint(s, (uint64_t)(field << 3 | wire)); }
void bytes_field(std::string& s, int field, const std::string& b) {
  tag(s, field, 2);
  varint(s, b.size());
  s += b;
}
template <class T>
void fixed(std::string& s, int field, T v) {  // double (wire 1) or float (wire 5)
  tag(s, field, sizeof(T) == 8 ? 1 : 5);
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const Crc32cTable table;
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; i++) c = table.t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const double t = wall_seconds();
  path_ = dir + "/events.out.tfevents." + std::to_string((long)t) + "." + host_name();
  f_ = std::fopen(path_.c_str(), "ab");
  if (!f_) throw UserError(kExitUsage, path_ + ": cannot write the TensorBoard file ([metrics] tensorboard_dir): " +
                                           std::strerror(errno));
  std::string e;  // Event {wall_time = 1, file_version = 3}
  fixed(e, 1, t);
  bytes_field(e, 3, "brain.Event:2");
  record(e);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::record(const std::string& event) {
  const uint64_t n = event.size();
  const uint32_t len_crc = masked(crc32c(&n, 8)), data_crc = masked(crc32c(event.data(), event.size()));
  const bool ok = std::fwrite(&n, 8, 1, f_) == 1 && std::fwrite(&len_crc, 4, 1, f_) == 1 &&
                  std::fwrite(event.data(), 1, event.size(), f_) == event.size() &&
                  std::fwrite(&data_crc, 4, 1, f_) == 1;
  if (!ok && !failed_) failed_ = true, errno_ = errno;
}

// Event {wall_time = 1, step = 2, summary = 5 {value = 1 {tag = 1, simple_value = 2}}}
void TensorBoardWriter::scalar(const std::string& name, long step, float value, double wall_time) {
  std::string v, summary, e;
  bytes_field(v, 1, name);
  fixed(v, 2, value);
  bytes_field(summary, 1, v);
  fixed(e, 1, wall_time);
  tag(e, 2, 0);
  varint(e, (uint64_t)step);
  bytes_field(e, 5, summary);
  record(e);
}

bool TensorBoardWriter::flush() {
  errno = 0;
  if (std::fflush(f_) != 0 && !failed_) failed_ = true, errno_ = errno;
  if (!failed_) return true;
  error_ = "cannot write " + path_ + ": " + std::strerror(errno_ ? errno_ : EIO);
  failed_ = false, errno_ = 0;
  std::clearerr(f_);
  return false;
}

}  // namespace trainer
