// weights.transport as a type: parsed once here from the job's string; weights/weight_transport.h
// resolves kAuto from the job (devices, hosts, workers that may join) and makes the publisher
// and reader of each transport. Nothing outside config/ and weights/ sees the string.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlforge {

enum class WeightTransport {
  kAuto,     // chosen per job by ResolveWeightTransport (weights/weight_transport.h)
  kShm,      // POSIX shared memory on the trainer's host
  kGloo,     // a broadcast group of trainer rank 0 and the engines (any host)
  kZmq,      // inline frames through the controller (any host)
  kCudaIpc,  // device-to-device from the trainer's exported GPU memory (one host)
  kNccl,     // bucket broadcasts between GPUs (any host)
};

// "auto", "shm", "gloo", "zmq", "cuda_ipc", "nccl": in enum order (the config's spelling).
const std::vector<std::string>& WeightTransportNames();
std::optional<WeightTransport> ParseWeightTransport(std::string_view name);
const std::string& WeightTransportName(WeightTransport t);

}  // namespace rlforge
