// TensorBoard event files: scalars per iteration, readable by TensorBoard.
//
// (step, tag, value) -> Event{Summary{Value}} protobuf -> TFRecord framing ->
//   <dir>/events.out.tfevents.<seconds>.<host>, flushed per record.
//
// A TFRecord is: uint64 length, uint32 masked crc32c(length), data, uint32
// masked crc32c(data), all little-endian. The first record holds the file
// version ("brain.Event:2"). Not thread-safe; one writer per file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace rlforge::dashboard {

// CRC-32C (Castagnoli), as TFRecord uses it.
uint32_t Crc32c(const void* data, size_t n);
// TFRecord's masking: rotate right by 15 bits and add 0xa282ead8.
uint32_t MaskCrc(uint32_t crc);
// One framed record around `data`.
std::string FrameRecord(std::string_view data);

class EventFileWriter {
 public:
  // Creates the file in `dir` (which must exist) and writes the version record.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(const std::string& dir,
                                                                 double wall_time,
                                                                 const std::string& host);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One Event with a simple_value per tag.
  absl::Status WriteScalars(int64_t step, double wall_time,
                            const std::map<std::string, double>& scalars);
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
  absl::Status WriteRecord(const std::string& data);
  std::FILE* file_;
  std::string path_;
};

// Seconds since the Unix epoch, as TensorBoard's wall_time.
double WallTimeSeconds();

}  // namespace rlforge::dashboard
