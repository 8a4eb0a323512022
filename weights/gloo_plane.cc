#include "weights/gloo_plane.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace rlforge {

namespace {

constexpr uint64_t kTrailer = 16;  // {nbytes, checksum}

torch::Tensor NewBuffer(uint64_t bucket_bytes) {
  return torch::empty({static_cast<int64_t>(bucket_bytes + kTrailer)}, torch::kUInt8);
}

char* Data(const torch::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// Waits a buffer's broadcast, if one is posted; the handle is then gone.
absl::Status Settle(std::unique_ptr<dist::Pending>& p) {
  if (p == nullptr) return absl::OkStatus();
  absl::Status s = p->Wait();
  p.reset();
  return s;
}

}  // namespace

GlooBroadcastSink::GlooBroadcastSink(dist::Communicator* comm, uint64_t bucket_bytes)
    : comm_(comm), bucket_bytes_(bucket_bytes) {
  for (auto& b : buf_) b = NewBuffer(bucket_bytes);
}

GlooBroadcastSink::~GlooBroadcastSink() {
  for (auto& p : pending_) Settle(p).IgnoreError();
}

absl::StatusOr<char*> GlooBroadcastSink::Acquire(int64_t version, int64_t bucket) {
  (void)version;
  const int slot = static_cast<int>(bucket % 2);
  if (absl::Status s = Settle(pending_[slot]); !s.ok()) return s;
  return Data(buf_[slot]);
}

absl::Status GlooBroadcastSink::Commit(int64_t version, int64_t bucket, uint64_t nbytes,
                                       uint64_t checksum) {
  (void)version;
  const int slot = static_cast<int>(bucket % 2);
  char* trailer = Data(buf_[slot]) + bucket_bytes_;
  std::memcpy(trailer, &nbytes, 8);
  std::memcpy(trailer + 8, &checksum, 8);
  pending_[slot] = comm_->Broadcast(buf_[slot], 0);
  return absl::OkStatus();
}

absl::Status GlooBroadcastSink::Drain() {
  for (auto& p : pending_) {
    if (absl::Status s = Settle(p); !s.ok()) return s;
  }
  return absl::OkStatus();
}

GlooBroadcastSource::GlooBroadcastSource(dist::Communicator* comm, uint64_t bucket_bytes)
    : comm_(comm), bucket_bytes_(bucket_bytes) {
  for (auto& b : buf_) b = NewBuffer(bucket_bytes);
}

GlooBroadcastSource::~GlooBroadcastSource() {
  for (auto& p : pending_) Settle(p).IgnoreError();
}

void GlooBroadcastSource::Post(int64_t bucket) {
  pending_[bucket % 2] = comm_->Broadcast(buf_[bucket % 2], 0);
  posted_ = bucket + 1;
}

absl::Status GlooBroadcastSource::Begin(int64_t version, int64_t buckets) {
  (void)version;
  for (auto& p : pending_) {
    if (p != nullptr) return absl::InternalError("a broadcast of the last version is unfinished");
  }
  buckets_ = buckets;
  posted_ = 0;
  if (buckets > 0) Post(0);
  return absl::OkStatus();
}

absl::StatusOr<BucketSource::Bucket> GlooBroadcastSource::Next(int64_t version, int64_t bucket) {
  (void)version;
  if (bucket >= posted_) Post(bucket);
  const int slot = static_cast<int>(bucket % 2);
  if (absl::Status s = Settle(pending_[slot]); !s.ok()) return s;
  // The other buffer was released with bucket - 1: receive bucket + 1 into it meanwhile.
  if (bucket + 1 < buckets_ && posted_ == bucket + 1) Post(bucket + 1);
  Bucket b;
  b.data = Data(buf_[slot]);
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
