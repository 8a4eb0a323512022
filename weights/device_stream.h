// The weight stream (weights/bucket_stream.h) with its buckets as torch tensors on any device:
// what the GPU transports (nccl, cuda_ipc) move, packed and unpacked by the device itself.
//
// trainer: full units on the device -> DeviceBucketWriter.Append(each tensor, manifest order):
//   each tensor's part of a bucket cast to the manifest's dtype (copy_) into the bucket tensor
//   -> DeviceBucketSink::Commit -> Finish drains the sink
// engine: MatchDeviceDestinations(manifest, its parameters) -> ReadDeviceVersion:
//   DeviceBucketSource::Next -> each tensor's part widened (copy_) into the parameter ->
//   Release -> End (a source that can be overwritten under the reader checks it was not)
//
// The bytes are BucketWriter's for the same values (fp32 as is; bfloat16 rounded to nearest
// even by torch's cast, as FloatToBf16Bits rounds; a NaN stays a NaN, its payload torch's), so the
// manifest's layout is one concept for every transport. What this path does not do is hash
// the buckets: a checksum on the device would need a kernel, or a host copy of every bucket
// that the path exists to avoid. Sources check what they can cheaply: the version, the bucket
// index and size (docs/weight_sync.md, "Weight sync on GPU").
//
// Tensors are uint8 buckets on one device; the writer and reader run on one thread, issuing
// work on torch's current stream of that device (so a sink or source that hands a buffer to
// another stream or process synchronizes first).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control.pb.h"
#include "weights/bucket_stream.h"

namespace rlforge {

// torch's dtype for a manifest's ("float32" | "bfloat16"; MatchOrder refuses others).
torch::ScalarType WireScalarType(const proto::WeightManifest& m);

// Where a DeviceBucketWriter's buckets go. Each call may wait, up to the sink's deadline.
class DeviceBucketSink {
 public:
  virtual ~DeviceBucketSink() = default;
  // A uint8 tensor of at least BucketBytes(m, bucket) bytes to fill with `bucket` of `version`
  // (waits until its previous bucket was taken).
  virtual absl::StatusOr<torch::Tensor> Acquire(int64_t version, int64_t bucket) = 0;
  // The tensor from Acquire holds the bucket's `nbytes` bytes.
  virtual absl::Status Commit(int64_t version, int64_t bucket, uint64_t nbytes) = 0;
  // Waits until every committed bucket was taken (and, for a sink another process reads, is
  // visible there).
  virtual absl::Status Drain() = 0;
};

// Where a ReadDeviceVersion's buckets come from.
class DeviceBucketSource {
 public:
  virtual ~DeviceBucketSource() = default;
  // `version` is about to be read: `buckets` buckets.
  virtual absl::Status Begin(int64_t version, int64_t buckets) = 0;
  // `bucket` of `version` (asked for in order, each once): a uint8 tensor of its bytes.
  virtual absl::StatusOr<torch::Tensor> Next(int64_t version, int64_t bucket) = 0;
  // Done with `bucket`: its buffer may be reused (once the device finished reading it).
  virtual absl::Status Release(int64_t version, int64_t bucket) = 0;
  // Every bucket was read: an error if what was read may not be `version` whole.
  virtual absl::Status End(int64_t version) { return absl::OkStatus(); }
};

// The whole stream in one uint8 tensor of total_bytes (any device): an engine's staging copy,
// a CUDA IPC slot, and the tests' reference.
class WholeStreamSink final : public DeviceBucketSink {
 public:
  // `m` and the tensor outlive the sink.
  WholeStreamSink(const proto::WeightManifest& m, torch::Tensor stream)
      : m_(m), stream_(std::move(stream)) {}
  absl::StatusOr<torch::Tensor> Acquire(int64_t version, int64_t bucket) override;
  absl::Status Commit(int64_t, int64_t, uint64_t) override { return absl::OkStatus(); }
  absl::Status Drain() override { return absl::OkStatus(); }

 private:
  const proto::WeightManifest& m_;
  torch::Tensor stream_;
};

class WholeStreamSource final : public DeviceBucketSource {
 public:
  WholeStreamSource(const proto::WeightManifest& m, torch::Tensor stream)
      : m_(m), stream_(std::move(stream)) {}
  absl::Status Begin(int64_t, int64_t) override { return absl::OkStatus(); }
  absl::StatusOr<torch::Tensor> Next(int64_t version, int64_t bucket) override;
  absl::Status Release(int64_t, int64_t) override { return absl::OkStatus(); }

 private:
  const proto::WeightManifest& m_;
  torch::Tensor stream_;
};

// Packs one version into a sink, tensor by tensor in manifest order. One use per version.
class DeviceBucketWriter {
 public:
  DeviceBucketWriter(const proto::WeightManifest& m, DeviceBucketSink& sink, int64_t version)
      : m_(m), sink_(sink), version_(version) {}
  // The manifest's next tensor: `name`, its values (any float dtype, on the sink's device;
  // read as a flat contiguous run).
  absl::Status Append(const std::string& name, const torch::Tensor& values);
  // Commits the last bucket and drains the sink.
  absl::Status Finish();

 private:
  absl::Status Commit();  // the open bucket

  const proto::WeightManifest& m_;
  DeviceBucketSink& sink_;
  const int64_t version_;
  int next_tensor_ = 0;
  uint64_t cursor_ = 0;  // stream bytes written
  int64_t bucket_ = -1;  // the open bucket, or -1
  torch::Tensor buf_;
};

// `mine` (an engine's parameters, by name) in m's order (MatchOrder's checks and errors).
absl::StatusOr<std::vector<torch::Tensor>> MatchDeviceDestinations(
    const proto::WeightManifest& m, const std::vector<std::pair<std::string, torch::Tensor>>& mine,
    const std::string& who);

// Reads `version` of a stream with manifest `m` from `source` into `dest` (MatchDevice-
// Destinations' order; contiguous, any float dtype), bucket by bucket. A bucket of another
// size than the manifest's, or a failed Next or End, is refused, the error naming `who`, the
// version and the bucket. Buckets before a failure are already in `dest`: a caller that
// writes a live model in place marks it torn. Returns once the device finished (the caller may
// let go of the source's buffers).
absl::StatusOr<ReadStats> ReadDeviceVersion(const proto::WeightManifest& m, int64_t version,
                                            DeviceBucketSource& source,
                                            const std::vector<torch::Tensor>& dest,
                                            const std::string& who);

// Waits until the device of `t` finished the work issued so far on its current stream (a
// no-op on the CPU).
void SynchronizeWith(const torch::Tensor& t);

}  // namespace rlforge
