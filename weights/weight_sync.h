// Weight publishing through POSIX shared memory (trainer -> rollout, one host).
//
// trainer: WeightPublisher::Publish(version, bytes) -> WeightsReady (name,
//   version, size, checksum, layout hash) -> controller -> rollout workers:
//   WeightReader::Read(WeightsReady) -> bytes
//
// Two slots alternate by version parity. A slot's version field is set to -1
// before writing and to the version after (release/acquire), the reader
// checks it before and after copying and verifies the checksum, so a reader
// never uses a half-written or overwritten version. The publisher owns (and
// unlinks) the segment. Each object is used from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control.pb.h"

namespace rlforge {

// 64-bit checksum of a byte buffer, word at a time (fast enough for GB-sized weights).
uint64_t WeightChecksum(const void* data, size_t size);

// The WeightsReady of weights sent inline (weights.transport: zmq): location "inline", the
// flat buffer's size and checksum; the bytes go as a "weights" tensor frame beside it.
proto::WeightsReady InlineWeights(int64_t version, const std::vector<float>& flat,
                                  uint64_t layout_hash);

class WeightPublisher {
 public:
  // Creates the segment "/<name>" sized for `nbytes` per slot.
  static absl::StatusOr<WeightPublisher> Create(const std::string& name, size_t nbytes,
                                                uint64_t layout_hash);
  WeightPublisher(WeightPublisher&& o) noexcept;
  WeightPublisher& operator=(WeightPublisher&&) = delete;
  ~WeightPublisher();

  proto::WeightsReady Publish(int64_t version, const void* data);
  // Streaming form, for a writer that never holds the whole buffer (a sharded trainer
  // gathering unit by unit): BeginWrite marks version's slot as being written and returns
  // it (size() bytes) to fill; EndWrite checksums and commits it.
  char* BeginWrite(int64_t version);
  proto::WeightsReady EndWrite(int64_t version);
  size_t size() const { return nbytes_; }
  const std::string& name() const { return name_; }

 private:
  WeightPublisher(std::string name, void* base, size_t mapped, size_t nbytes, uint64_t layout);
  std::string name_;
  void* base_ = nullptr;
  size_t mapped_ = 0;
  size_t nbytes_ = 0;
  uint64_t layout_hash_ = 0;
};

class WeightReader {
 public:
  WeightReader() = default;
  WeightReader(const WeightReader&) = delete;
  ~WeightReader();
  // Copies version `ready.version()` into `out` (ready.nbytes() bytes), after
  // checking layout, version and checksum; errors name what did not match.
  absl::Status Read(const proto::WeightsReady& ready, uint64_t expected_layout, void* out);

 private:
  absl::Status Map(const std::string& name);
  std::string name_;
  void* base_ = nullptr;
  size_t mapped_ = 0;
};

}  // namespace rlforge
