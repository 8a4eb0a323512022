// The nccl transport of the weight plane: the stream's buckets broadcast from device memory
// to device memory over a weight group of the publisher (rank 0, trainer rank 0) and the
// engines (ranks 1..M), formed with dist::ConnectGroup and GroupOptions::device "cuda:N", so
// the bytes never cross host memory. Written against dist::Communicator and torch alone: on
// the CPU (a gloo group) it runs as it does on GPUs, which is how it is tested here.
//
// DeviceBroadcastSink: two device buffers of bucket_bytes + a 64-byte trailer {version,
//   bucket, nbytes}; Commit broadcasts the filled one while the writer fills the other.
// DeviceBroadcastSource: two buffers likewise; the broadcast of bucket b + 1 is posted before
//   bucket b is unpacked, so receiving overlaps unpacking. The trailer (24 bytes, copied to the
//   host) is checked against the version and bucket asked for: an engine out of step with the
//   publisher fails naming both, instead of loading another version's bytes.
//
// No bucket checksums (device_stream.h says why). Every rank posts one broadcast per bucket, in
// bucket order; each wait has the group's deadline. One thread per side.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "dist/communicator.h"
#include "weights/broadcast_buffers.h"
#include "weights/device_stream.h"

namespace rlforge {

class DeviceBroadcastSink final : public DeviceBucketSink {
 public:
  // `comm` (rank 0 of the weight group, its tensors on `device`) outlives the sink.
  DeviceBroadcastSink(dist::Communicator* comm, uint64_t bucket_bytes, torch::Device device);
  absl::StatusOr<torch::Tensor> Acquire(int64_t version, int64_t bucket) override;
  absl::Status Commit(int64_t version, int64_t bucket, uint64_t nbytes) override;
  absl::Status Drain() override;
  uint64_t bucket_bytes() const { return bucket_bytes_; }

 private:
  uint64_t bucket_bytes_;
  BroadcastBuffers buffers_;
};

class DeviceBroadcastSource final : public DeviceBucketSource {
 public:
  // `comm` (an engine's rank, >= 1, of the weight group, on `device`) outlives the source.
  DeviceBroadcastSource(dist::Communicator* comm, uint64_t bucket_bytes, torch::Device device);
  absl::Status Begin(int64_t version, int64_t buckets) override;
  absl::StatusOr<torch::Tensor> Next(int64_t version, int64_t bucket) override;
  absl::Status Release(int64_t version, int64_t bucket) override;
  uint64_t bucket_bytes() const { return bucket_bytes_; }

 private:
  uint64_t bucket_bytes_;
  BroadcastBuffers buffers_;
};

}  // namespace rlforge
