// The cuda_ipc transport of the weight plane: the trainer and the engines on GPUs of one host.
// The trainer packs each version (device_stream.h's layout) into one of two device slots by
// version parity, exported once over CUDA IPC; every engine copies it device-to-device from
// there into its own parameters. No bytes cross host memory, and no bucket waits on a reader.
//
// CudaIpcSink (trainer rank 0): Acquire of bucket 0 marks version's slot -1 (slot_markers.h)
//   -> the writer packs every bucket into the slot -> Drain: the device finished -> marker =
//   version
// CudaIpcSource (each engine): Begin waits until version's slot is marked with it -> Next
//   hands the slot's buckets to the reader, who copies them into its parameters -> End: the
//   copy finished, and the marker still holds the version, else the read was torn (refused)
//
// location: "cuda-ipc:<marker segment>:<slot stride>:<handle hex>". An engine maps a
// publisher's export once and keeps it; a new location (a new trainer) maps the new one.
// The slots are the model's stream twice (2 x total_bytes, bf16 halves it). A build whose
// libtorch is CPU-only has no such transport: Create and Open return Unimplemented there
// (config load refuses weights.transport cuda_ipc first).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "weights/device_stream.h"

namespace rlforge {

// "cuda-ipc:" locations.
inline constexpr char kCudaIpcPrefix[] = "cuda-ipc:";

class CudaIpcSink : public DeviceBucketSink {
 public:
  // Two slots for manifest `m` on `device` (a GPU), the markers in shared memory "/<name>".
  static absl::StatusOr<std::unique_ptr<CudaIpcSink>> Create(const std::string& name,
                                                             const proto::WeightManifest& m,
                                                             torch::Device device);
  ~CudaIpcSink() override = default;
  virtual std::string location() const = 0;
};

class CudaIpcSource : public DeviceBucketSource {
 public:
  // Maps `location` (CudaIpcSink::location) for this engine's GPU `device`. Waits for a
  // version up to timeout_s.
  static absl::StatusOr<std::unique_ptr<CudaIpcSource>> Open(const std::string& location,
                                                             const proto::WeightManifest& m,
                                                             torch::Device device,
                                                             double timeout_s);
  ~CudaIpcSource() override = default;
  virtual const std::string& location() const = 0;
};

}  // namespace rlforge
