#pragma once
// TensorBoard event files, written directly: each record is a u64 length,
// its masked CRC-32C, a serialised Event protobuf and the data's masked
// CRC-32C (../shared/FORMATS.md). Only scalars are written, so the two
// protobuf messages (Event, Summary.Value) are encoded by hand here; no
// protobuf library is needed. CRC-32C (Castagnoli) is a 256-entry table:
// Debian packages no C library for it.
#include <cstdint>
#include <cstdio>
#include <string>

namespace trainer {

uint32_t crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates DIR (and parents) and DIR/events.out.tfevents.<seconds>.<host>.
  // Throws UserError (exit 2) naming the directory if it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& tag, long step, float value, double wall_time);
  // False when a record since the last flush could not be written; error()
  // says the file and the system's reason ("...: No space left on device").
  bool flush();
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_, error_;
  FILE* f_ = nullptr;
  bool failed_ = false;
  int errno_ = 0;
};

}  // namespace trainer
