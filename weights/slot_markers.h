// The version markers of two slots whose bytes live outside host memory (a CUDA IPC export on
// the trainer's GPU), in a small POSIX shared-memory header beside them: the protocol of
// weight_sync's segment, without the checksum.
//
// publisher: BeginWrite(v): slot v % 2's marker = -1 (release) -> write the slot -> make the
//   bytes visible (device synchronize) -> EndWrite(v): marker = v (release)
// reader: AwaitVersion(v): its slot's marker is v (acquire; waits, with a deadline) -> copy
//   the slot -> the copy finished (device synchronize) -> CheckStill(v): the marker is still v,
//   else the slot was rewritten while being copied (torn: the copy is refused)
//
// The publisher owns and unlinks the header; it records its pid, so a reader waiting on a
// publisher that died says so at once. Same host only. One thread per object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace rlforge {

struct SlotMarkerHeader;

class SlotMarkerWriter {
 public:
  // Creates "/<name>" (both markers -1: nothing published yet).
  static absl::StatusOr<std::unique_ptr<SlotMarkerWriter>> Create(const std::string& name);
  ~SlotMarkerWriter();
  const std::string& name() const { return name_; }
  void BeginWrite(int64_t version);
  void EndWrite(int64_t version);

 private:
  SlotMarkerWriter(std::string name, SlotMarkerHeader* header)
      : name_(std::move(name)), header_(header) {}
  std::string name_;
  SlotMarkerHeader* header_;
};

class SlotMarkerReader {
 public:
  // Maps the header a SlotMarkerWriter created as `name`.
  static absl::StatusOr<std::unique_ptr<SlotMarkerReader>> Open(const std::string& name);
  ~SlotMarkerReader();
  // Waits until version's slot holds `version`. Fails at once when it holds a later one (the
  // publisher moved on: this version is gone) or the publisher exited; DeadlineExceeded past
  // timeout_s.
  absl::Status AwaitVersion(int64_t version, double timeout_s);
  // After a copy of the slot finished: DataLoss (a torn read) unless it still holds `version`.
  absl::Status CheckStill(int64_t version);

 private:
  SlotMarkerReader(std::string name, SlotMarkerHeader* header)
      : name_(std::move(name)), header_(header) {}
  std::string name_;
  SlotMarkerHeader* header_;
};

}  // namespace rlforge
