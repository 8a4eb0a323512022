#include "config/weight_transport.h"

namespace rlforge {

const std::vector<std::string>& WeightTransportNames() {
  static const std::vector<std::string> names = {"auto", "shm",      "gloo",
                                                 "zmq",  "cuda_ipc", "nccl"};
  return names;
}

std::optional<WeightTransport> ParseWeightTransport(std::string_view name) {
  const auto& names = WeightTransportNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<WeightTransport>(i);
  }
  return std::nullopt;
}

const std::string& WeightTransportName(WeightTransport t) {
  return WeightTransportNames()[static_cast<size_t>(t)];
}

}  // namespace rlforge
