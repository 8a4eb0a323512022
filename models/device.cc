#include "models/device.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "config/device.h"

namespace rlforge::models {

absl::StatusOr<torch::Device> TorchDevice(const std::string& key, const std::string& value,
                                          int rank) {
  absl::StatusOr<DeviceSpec> spec = ParseDevice(value);
  const std::string where = absl::StrCat(key, " ", value, " (rank ", rank, ")");
  if (!spec.ok())
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", spec.status().message()));
  if (!spec->cuda) return torch::Device(torch::kCPU);
  const std::string unsupported = DeviceUnsupportedReason(*spec);
  if (!unsupported.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": ", unsupported));
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (count == 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": no GPU is visible to this process",
        visible != nullptr ? absl::StrCat(" (CUDA_VISIBLE_DEVICES=", visible, ")") : ""));
  }
  const int index = spec->index >= 0 ? spec->index : rank % count;
  if (index >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": GPU ", index, " asked for, this process sees ", count));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace rlforge::models
