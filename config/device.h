// The value of a `device` key (trainer.device, engine.device): where a role computes.
//   cpu     the host's cores (the default)
//   cuda    a GPU each: trainer rank r, or engine r, uses GPU r of its host's visible ones
//   cuda:N  GPU N for every rank or engine of the role
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "config/schema.h"

namespace rlforge {

struct DeviceSpec {
  bool cuda = false;
  int index = -1;  // cuda:N's N; -1 for "cuda" (by rank) and for cpu
};

// An error says what was written and what is accepted.
absl::StatusOr<DeviceSpec> ParseDevice(const std::string& value);

// Whether a `device` value names a GPU (cuda or cuda:N; false for cpu and for a bad value).
bool OnCuda(const std::string& value);

// Whether this build can compute on `device`: "" if so, else the reason (a CPU-only libtorch
// has no CUDA, whatever the machine has).
std::string DeviceUnsupportedReason(const DeviceSpec& device);

// A section's check: reports a bad `device` value, or one this build cannot run, on its key.
void CheckDevice(const std::string& value, config::CheckContext& ctx);

}  // namespace rlforge
