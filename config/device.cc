#include "config/device.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "config/build_info.h"

namespace rlforge {

absl::StatusOr<DeviceSpec> ParseDevice(const std::string& value) {
  DeviceSpec d;
  if (value == "cpu") return d;
  d.cuda = true;
  if (value == "cuda") return d;
  int index = -1;
  if (absl::StartsWith(value, "cuda:") && absl::SimpleAtoi(value.substr(5), &index) && index >= 0 &&
      value.substr(5).find_first_not_of("0123456789") == std::string::npos) {
    d.index = index;
    return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", value, "' is not a device: expected cpu, cuda or cuda:N (N >= 0)"));
}

bool OnCuda(const std::string& value) {
  absl::StatusOr<DeviceSpec> d = ParseDevice(value);
  return d.ok() && d->cuda;
}

std::string DeviceUnsupportedReason(const DeviceSpec& device) {
  if (!device.cuda || RLFORGE_TORCH_CUDA) return "";
  return "this rlforge is built against a CPU-only libtorch (Debian's); build it with "
         "-DRLFORGE_CUDA=ON against the torch wheel's CUDA libtorch (docs/gpu.md)";
}

void CheckDevice(const std::string& value, config::CheckContext& ctx) {
  absl::StatusOr<DeviceSpec> d = ParseDevice(value);
  if (!d.ok()) {
    ctx.Error("device", std::string(d.status().message()));
    return;
  }
  const std::string why = DeviceUnsupportedReason(*d);
  if (!why.empty()) ctx.Error("device", absl::StrCat(value, ": ", why));
}

}  // namespace rlforge
