#include "weights/gloo_plane.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace rlforge {

namespace {

constexpr uint64_t kTrailer = 16;  // {nbytes, checksum}

char* Data(const torch::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

}  // namespace

GlooBroadcastSink::GlooBroadcastSink(dist::Communicator* comm, uint64_t bucket_bytes)
    : bucket_bytes_(bucket_bytes),
      buffers_(comm, static_cast<int64_t>(bucket_bytes + kTrailer), torch::kCPU) {}

absl::StatusOr<char*> GlooBroadcastSink::Acquire(int64_t version, int64_t bucket) {
  (void)version;
  absl::StatusOr<torch::Tensor> buf = buffers_.Free(bucket);
  if (!buf.ok()) return buf.status();
  return Data(*buf);
}

absl::Status GlooBroadcastSink::Commit(int64_t version, int64_t bucket, uint64_t nbytes,
                                       uint64_t checksum) {
  (void)version;
  absl::StatusOr<torch::Tensor> buf = buffers_.Free(bucket);  // Acquire settled it already
  if (!buf.ok()) return buf.status();
  char* trailer = Data(*buf) + bucket_bytes_;
  std::memcpy(trailer, &nbytes, 8);
  std::memcpy(trailer + 8, &checksum, 8);
  buffers_.Send(bucket);
  return absl::OkStatus();
}

absl::Status GlooBroadcastSink::Drain() { return buffers_.Drain(); }

GlooBroadcastSource::GlooBroadcastSource(dist::Communicator* comm, uint64_t bucket_bytes)
    : bucket_bytes_(bucket_bytes),
      buffers_(comm, static_cast<int64_t>(bucket_bytes + kTrailer), torch::kCPU) {}

absl::Status GlooBroadcastSource::Begin(int64_t version, int64_t buckets) {
  (void)version;
  return buffers_.Begin(buckets);
}

absl::StatusOr<BucketSource::Bucket> GlooBroadcastSource::Next(int64_t version, int64_t bucket) {
  (void)version;
  absl::StatusOr<torch::Tensor> buf = buffers_.Receive(bucket);
  if (!buf.ok()) return buf.status();
  Bucket b;
  b.data = Data(*buf);
  std::memcpy(&b.nbytes, b.data + bucket_bytes_, 8);
  std::memcpy(&b.checksum, b.data + bucket_bytes_ + 8, 8);
  if (b.nbytes > bucket_bytes_) {
    return absl::DataLossError(absl::StrCat("bucket trailer claims ", b.nbytes, " bytes"));
  }
  return b;
}

absl::Status GlooBroadcastSource::Release(int64_t version, int64_t bucket) {
  (void)version;
  (void)bucket;
  return absl::OkStatus();
}

}  // namespace rlforge
