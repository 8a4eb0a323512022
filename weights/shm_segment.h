// POSIX shared-memory segments of the weight plane: created (and sized) by the publisher,
// mapped by readers. Both the control policies' segment (weight_sync) and the language
// models' ring (shm_ring) live in one.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace rlforge {

struct MappedSegment {
  void* base = nullptr;
  size_t size = 0;
};

// "/name" (a leading slash added when missing), created anew and mapped read-write with
// `size` bytes; removed again when any step fails.
absl::StatusOr<MappedSegment> CreateSegment(const std::string& shm_name, size_t size);

// An existing segment mapped whole, read-write or read-only. `hint` ends the error of a
// segment that cannot be opened (e.g. which transport to use across hosts).
absl::StatusOr<MappedSegment> OpenSegment(const std::string& shm_name, bool writable,
                                          const std::string& hint);

}  // namespace rlforge
