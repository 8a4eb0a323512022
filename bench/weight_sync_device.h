// weight_sync_bench --transport cuda_ipc|nccl: the weight plane's GPU transports
// (weights/device_stream.h) at the bench's model size, against a bare device copy or a bare
// NCCL broadcast of the same bytes in the same run (bench/weight_sync_device.cc).
#pragma once

#include <string>
#include <vector>

#include "weights/bucket_stream.h"

namespace rlforge {

struct DeviceBenchArgs {
  std::string transport;           // cuda_ipc | nccl
  std::string role = "publisher";  // publisher | engine
  std::string where;               // engine: the cuda-ipc location or the store address
  std::string dtype = "float32";
  double bucket_mb = 256;
  int reps = 3;
};

// The publisher prints its table (or one "skipped: <why>" line where the machine lacks the
// GPUs) and returns the exit status; an engine process serves the publisher it was started by.
int RunDeviceTransportBench(const DeviceBenchArgs& a, const std::vector<TensorSpec>& model);

}  // namespace rlforge
