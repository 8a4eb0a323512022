// The weight plane's stream: a model's tensors as one byte stream cut into fixed-size
// buckets, written by the trainer and read by every rollout engine, bucket by bucket.
//
// trainer: MakeManifest(tensors, dtype, bucket_bytes) -> BucketWriter.Append(each tensor, in
//   manifest order) -> every full bucket: checksummed -> BucketSink::Commit
//   (sinks: shm ring, gloo broadcast, frames through the controller) -> Finish: every bucket's
//   checksum, once every reader took every bucket
// engine: MatchDestinations(manifest, its parameters) -> ReadVersion: BucketSource::Next ->
//   chunk by chunk (hot in cache): checksum and unpack into the parameters -> compare with the
//   publisher's checksum -> Release (the publisher may reuse the buffer)
//
// A sink owns two buffers of bucket_bytes: one fills while the other drains, so neither side
// holds more than its model plus two buckets. A bucket's checksum (BucketChecksum: a hash of
// 1 MiB chunk hashes) is computed by the writer as it fills and checked by the reader as it
// unpacks; the checksum travels with the bucket (slot header, broadcast trailer, manifest).
// Torch-free: tensors are named fp32 buffers; bfloat16 on the wire is rounded to nearest even
// by the writer and widened by the reader.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/control.pb.h"

namespace rlforge {

// The checksum of one bucket's bytes.
uint64_t BucketChecksum(const void* data, uint64_t size);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Tensors in order, packed in `dtype` ("float32" | "bfloat16") into buckets of bucket_bytes
// (a multiple of 64; no larger than the stream, rounded up to 64, so a small model's buffers
// are its size).
proto::WeightManifest MakeManifest(const std::vector<TensorSpec>& tensors, const std::string& dtype,
                                   uint64_t bucket_bytes);
int64_t BucketCount(const proto::WeightManifest& m);
uint64_t BucketBytes(const proto::WeightManifest& m, int64_t bucket);  // the last one shorter

// The part of m's tensor `tensor` (its index) that lies in stream bytes [begin, end).
struct StreamSpan {
  int tensor = 0;
  uint64_t begin = 0, end = 0;
};
// Every tensor's part of stream bytes [lo, hi), in stream order (the writer's and every
// reader's way to cut a bucket into tensors).
std::vector<StreamSpan> SpansIn(const proto::WeightManifest& m, uint64_t lo, uint64_t hi);

// `mine` (a reader's names and shapes) in m's order: for each of m's tensors, its index in
// `mine`. An error naming `who` and the first tensor that differs (missing on either side, or
// another shape), or a dtype or bucket size this reader does not know.
absl::StatusOr<std::vector<size_t>> MatchOrder(const proto::WeightManifest& m,
                                               const std::vector<TensorSpec>& mine,
                                               const std::string& who);

// A model's own fp32 parameter, where a reader writes what the stream holds for `name`.
struct Destination {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;
};

// `mine` ordered as m's tensors (MatchOrder, its errors).
absl::StatusOr<std::vector<float*>> MatchDestinations(const proto::WeightManifest& m,
                                                      const std::vector<Destination>& mine,
                                                      const std::string& who);

// Where the writer's buckets go. Each call may wait, up to the sink's deadline.
class BucketSink {
 public:
  virtual ~BucketSink() = default;
  // A buffer of the manifest's bucket_bytes to fill with `bucket` of `version` (waits until the
  // buffer's previous bucket was taken by every reader).
  virtual absl::StatusOr<char*> Acquire(int64_t version, int64_t bucket) = 0;
  // The buffer from Acquire holds the bucket: `nbytes` bytes with `checksum`.
  virtual absl::Status Commit(int64_t version, int64_t bucket, uint64_t nbytes,
                              uint64_t checksum) = 0;
  // Waits until every committed bucket was taken by every reader.
  virtual absl::Status Drain() = 0;
};

// Where a reader's buckets come from.
class BucketSource {
 public:
  struct Bucket {
    const char* data = nullptr;
    uint64_t nbytes = 0;
    uint64_t checksum = 0;  // what the publisher computed
  };
  virtual ~BucketSource() = default;
  // `version` is about to be read: `buckets` buckets (a source may fetch ahead).
  virtual absl::Status Begin(int64_t version, int64_t buckets) { return absl::OkStatus(); }
  // Waits for `bucket` of `version` (buckets are asked for in order, each once).
  virtual absl::StatusOr<Bucket> Next(int64_t version, int64_t bucket) = 0;
  // Done with `bucket`: its buffer may be reused.
  virtual absl::Status Release(int64_t version, int64_t bucket) = 0;
};

// The whole stream in one buffer (the inline path: the buffer travels as a frame through the
// controller, so it holds the model; meant for small models and tests).
class MemorySink final : public BucketSink {
 public:
  // `stream`: total_bytes of m, outliving the sink.
  MemorySink(const proto::WeightManifest& m, char* stream) : m_(m), stream_(stream) {}
  absl::StatusOr<char*> Acquire(int64_t version, int64_t bucket) override;
  absl::Status Commit(int64_t, int64_t, uint64_t, uint64_t) override { return absl::OkStatus(); }
  absl::Status Drain() override { return absl::OkStatus(); }

 private:
  const proto::WeightManifest& m_;
  char* stream_;
};

class MemorySource final : public BucketSource {
 public:
  // `stream` and `checksums` (every bucket's, as published) outlive the source.
  MemorySource(const proto::WeightManifest& m, const char* stream,
               const std::vector<uint64_t>& checksums)
      : m_(m), stream_(stream), checksums_(checksums) {}
  absl::StatusOr<Bucket> Next(int64_t version, int64_t bucket) override;
  absl::Status Release(int64_t, int64_t) override { return absl::OkStatus(); }

 private:
  const proto::WeightManifest& m_;
  const char* stream_;
  const std::vector<uint64_t>& checksums_;
};

// Packs one version into a sink, tensor by tensor in manifest order. One use per version.
class ChunkHasher;

class BucketWriter {
 public:
  BucketWriter(const proto::WeightManifest& m, BucketSink& sink, int64_t version);
  ~BucketWriter();
  // The manifest's next tensor: `name`, its fp32 values.
  absl::Status Append(const std::string& name, const float* data, int64_t numel);
  // Commits the last bucket and drains the sink; every bucket's checksum.
  absl::StatusOr<std::vector<uint64_t>> Finish();

 private:
  absl::Status Open();    // acquires the bucket holding the cursor
  absl::Status Commit();  // commits the open bucket
  void HashChunks(bool all);

  const proto::WeightManifest& m_;
  BucketSink& sink_;
  const int64_t version_;
  const uint64_t esize_;
  size_t next_tensor_ = 0;
  uint64_t cursor_ = 0;  // stream bytes written
  int64_t bucket_ = -1;  // open bucket, or -1
  char* buf_ = nullptr;
  std::unique_ptr<ChunkHasher> chunk_;  // the open bucket's current chunk
  std::vector<uint64_t> chunk_sums_, sums_;
};

struct ReadStats {
  double seconds = 0;
  uint64_t bytes = 0;
  int64_t buckets = 0;
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

// Reads `version` of a stream with manifest `m` from `source` into `dest` (MatchDestinations'
// order), bucket by bucket. A bucket whose checksum fails is refused, the error naming `who`,
// the version and the bucket; so is a failed Next. Buckets before a failure are already in
// `dest`: a caller that writes a live model in place marks it torn.
absl::StatusOr<ReadStats> ReadVersion(const proto::WeightManifest& m, int64_t version,
                                      BucketSource& source, const std::vector<float*>& dest,
                                      const std::string& who);

}  // namespace rlforge
