#include "weights/device_broadcast.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/exceptions.h"
#include "common/status.h"

namespace rlforge {

namespace {

constexpr int64_t kTrailer = 64;  // {version, bucket, nbytes} as int64, padded to 64 bytes

torch::Tensor NewBuffer(uint64_t bucket_bytes, torch::Device device) {
  return torch::empty({static_cast<int64_t>(bucket_bytes) + kTrailer},
                      torch::dtype(torch::kUInt8).device(device));
}

// Waits a buffer's broadcast, if one is posted; the handle is then gone.
absl::Status Settle(std::unique_ptr<dist::Pending>& p) {
  if (p == nullptr) return absl::OkStatus();
  absl::Status s = p->Wait();
  p.reset();
  return s;
}

}  // namespace

DeviceBroadcastSink::DeviceBroadcastSink(dist::Communicator* comm, uint64_t bucket_bytes,
                                         torch::Device device)
    : comm_(comm), bucket_bytes_(bucket_bytes) {
  for (auto& b : buf_) b = NewBuffer(bucket_bytes, device);
}

DeviceBroadcastSink::~DeviceBroadcastSink() {
  for (auto& p : pending_) Settle(p).IgnoreError();
}

absl::StatusOr<torch::Tensor> DeviceBroadcastSink::Acquire(int64_t version, int64_t bucket) {
  (void)version;
  const int slot = static_cast<int>(bucket % 2);
  RETURN_IF_ERROR(Settle(pending_[slot]));
  return buf_[slot];
}

absl::Status DeviceBroadcastSink::Commit(int64_t version, int64_t bucket, uint64_t nbytes) {
  const int slot = static_cast<int>(bucket % 2);
  return CallCatching([&]() -> absl::Status {
    const int64_t trailer[3] = {version, bucket, static_cast<int64_t>(nbytes)};
    torch::Tensor host = torch::empty({kTrailer}, torch::kUInt8);
    std::memset(host.data_ptr(), 0, kTrailer);
    std::memcpy(host.data_ptr(), trailer, sizeof(trailer));
    buf_[slot].narrow(0, static_cast<int64_t>(bucket_bytes_), kTrailer).copy_(host);
    pending_[slot] = comm_->Broadcast(buf_[slot], 0);
    return absl::OkStatus();
  });
}

absl::Status DeviceBroadcastSink::Drain() {
  for (auto& p : pending_) RETURN_IF_ERROR(Settle(p));
  return absl::OkStatus();
}

DeviceBroadcastSource::DeviceBroadcastSource(dist::Communicator* comm, uint64_t bucket_bytes,
                                             torch::Device device)
    : comm_(comm), bucket_bytes_(bucket_bytes) {
  for (auto& b : buf_) b = NewBuffer(bucket_bytes, device);
}

DeviceBroadcastSource::~DeviceBroadcastSource() {
  for (auto& p : pending_) Settle(p).IgnoreError();
}

void DeviceBroadcastSource::Post(int64_t bucket) {
  pending_[bucket % 2] = comm_->Broadcast(buf_[bucket % 2], 0);
  posted_ = bucket + 1;
}

absl::Status DeviceBroadcastSource::Begin(int64_t version, int64_t buckets) {
  (void)version;
  for (auto& p : pending_) {
    if (p != nullptr) return absl::InternalError("a broadcast of the last version is unfinished");
  }
  buckets_ = buckets;
  posted_ = 0;
  if (buckets > 0) Post(0);
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> DeviceBroadcastSource::Next(int64_t version, int64_t bucket) {
  if (bucket >= posted_) Post(bucket);
  const int slot = static_cast<int>(bucket % 2);
  RETURN_IF_ERROR(Settle(pending_[slot]));
  // The other buffer was released with bucket - 1: receive bucket + 1 into it meanwhile.
  if (bucket + 1 < buckets_ && posted_ == bucket + 1) Post(bucket + 1);
  return CallCatching([&]() -> absl::StatusOr<torch::Tensor> {
    const torch::Tensor host =
        buf_[slot].narrow(0, static_cast<int64_t>(bucket_bytes_), kTrailer).to(torch::kCPU);
    int64_t trailer[3];
    std::memcpy(trailer, host.data_ptr(), sizeof(trailer));
    if (trailer[0] != version || trailer[1] != bucket) {
      return absl::DataLossError(absl::StrCat("the publisher broadcast bucket ", trailer[1],
                                              " of version ", trailer[0], " where bucket ", bucket,
                                              " of version ", version, " was expected"));
    }
    if (trailer[2] < 0 || static_cast<uint64_t>(trailer[2]) > bucket_bytes_) {
      return absl::DataLossError(absl::StrCat("bucket trailer claims ", trailer[2], " bytes"));
    }
    return buf_[slot].narrow(0, 0, trailer[2]);
  });
}

absl::Status DeviceBroadcastSource::Release(int64_t version, int64_t bucket) {
  (void)version;
  (void)bucket;
  return absl::OkStatus();
}

}  // namespace rlforge
