// The collective path of the weight plane: a broadcast group of the publisher (rank 0, trainer
// rank 0) and the engines (ranks 1..M), over dist::Communicator (gloo on CPU, any host).
//
// GlooBroadcastSink: two buffers of bucket_bytes + a 16-byte trailer {nbytes, checksum};
//   Commit broadcasts the filled one while the writer fills the other.
// GlooBroadcastSource: two buffers likewise; the broadcast of bucket b + 1 is posted before
//   bucket b is unpacked, so receiving overlaps unpacking.
//
// Every rank posts one broadcast per bucket, in bucket order (a collective's contract). Each
// wait has the group's deadline. The group's members are fixed when it forms: the publisher
// and every engine of the job.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

#include "dist/communicator.h"
#include "weights/broadcast_buffers.h"
#include "weights/bucket_stream.h"

namespace rlforge {

// The group name both sides meet under, and the location engines are told.
inline constexpr char kWeightGroup[] = "weights";

class GlooBroadcastSink final : public BucketSink {
 public:
  // `comm` (rank 0 of the weight group) outlives the sink.
  GlooBroadcastSink(dist::Communicator* comm, uint64_t bucket_bytes);
  absl::StatusOr<char*> Acquire(int64_t version, int64_t bucket) override;
  absl::Status Commit(int64_t version, int64_t bucket, uint64_t nbytes, uint64_t checksum) override;
  absl::Status Drain() override;
  uint64_t bucket_bytes() const { return bucket_bytes_; }

 private:
  uint64_t bucket_bytes_;
  BroadcastBuffers buffers_;
};

class GlooBroadcastSource final : public BucketSource {
 public:
  // `comm` (an engine's rank, >= 1, of the weight group) outlives the source.
  GlooBroadcastSource(dist::Communicator* comm, uint64_t bucket_bytes);
  absl::Status Begin(int64_t version, int64_t buckets) override;
  absl::StatusOr<Bucket> Next(int64_t version, int64_t bucket) override;
  absl::Status Release(int64_t version, int64_t bucket) override;
  uint64_t bucket_bytes() const { return bucket_bytes_; }

 private:
  uint64_t bucket_bytes_;
  BroadcastBuffers buffers_;
};

}  // namespace rlforge
