// POSIX shared-memory segments of the weight plane: created (and sized) by the publisher,
// mapped by readers. Both the control policies' segment (weight_sync) and the language
// models' ring (shm_ring) live in one.
#pragma once

#include <cstddef>
#include <functional>
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

// The segment name of this process's weight publisher for `actor_id`:
// "/rlforge-w-<pid>-<actor_id>". First it unlinks every /dev/shm/rlforge-w-<pid>-* whose pid is
// gone: a publisher killed with SIGKILL cannot unlink its own, and each would hold its slots
// until reboot. (Pids are this pid namespace's: hosts whose containers share /dev/shm but not
// pids must not run publishers in both.)
std::string PublisherSegmentName(const std::string& actor_id);

// Polls `done` with a growing sleep (a bucket takes milliseconds to fill, a spin would steal
// the core the other side needs). `failed` (checked every few ms) returns why waiting is
// pointless, or "" (an Aborted error with it). Past timeout_s: DeadlineExceeded, "<what> within
// <timeout_s> s (weights.timeout_s)".
absl::Status AwaitCondition(const std::function<bool()>& done,
                            const std::function<std::string()>& failed, double timeout_s,
                            const std::string& what);

}  // namespace rlforge
