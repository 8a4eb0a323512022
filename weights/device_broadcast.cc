#include "weights/device_broadcast.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/exceptions.h"
#include "common/status.h"

namespace rlforge {

namespace {

constexpr int64_t kTrailer = 64;  // {version, bucket, nbytes} as int64, padded to 64 bytes

}  // namespace

DeviceBroadcastSink::DeviceBroadcastSink(dist::Communicator* comm, uint64_t bucket_bytes,
                                         torch::Device device)
    : bucket_bytes_(bucket_bytes),
      buffers_(comm, static_cast<int64_t>(bucket_bytes) + kTrailer, torch::device(device)) {}

absl::StatusOr<torch::Tensor> DeviceBroadcastSink::Acquire(int64_t version, int64_t bucket) {
  (void)version;
  return buffers_.Free(bucket);
}

absl::Status DeviceBroadcastSink::Commit(int64_t version, int64_t bucket, uint64_t nbytes) {
  ASSIGN_OR_RETURN(torch::Tensor buf, buffers_.Free(bucket));  // Acquire settled it already
  return CallCatching([&]() -> absl::Status {
    const int64_t trailer[3] = {version, bucket, static_cast<int64_t>(nbytes)};
    torch::Tensor host = torch::empty({kTrailer}, torch::kUInt8);
    std::memset(host.data_ptr(), 0, kTrailer);
    std::memcpy(host.data_ptr(), trailer, sizeof(trailer));
    buf.narrow(0, static_cast<int64_t>(bucket_bytes_), kTrailer).copy_(host);
    buffers_.Send(bucket);
    return absl::OkStatus();
  });
}

absl::Status DeviceBroadcastSink::Drain() { return buffers_.Drain(); }

DeviceBroadcastSource::DeviceBroadcastSource(dist::Communicator* comm, uint64_t bucket_bytes,
                                             torch::Device device)
    : bucket_bytes_(bucket_bytes),
      buffers_(comm, static_cast<int64_t>(bucket_bytes) + kTrailer, torch::device(device)) {}

absl::Status DeviceBroadcastSource::Begin(int64_t version, int64_t buckets) {
  (void)version;
  return buffers_.Begin(buckets);
}

absl::StatusOr<torch::Tensor> DeviceBroadcastSource::Next(int64_t version, int64_t bucket) {
  ASSIGN_OR_RETURN(torch::Tensor buf, buffers_.Receive(bucket));
  return CallCatching([&]() -> absl::StatusOr<torch::Tensor> {
    const torch::Tensor host =
        buf.narrow(0, static_cast<int64_t>(bucket_bytes_), kTrailer).to(torch::kCPU);
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
    return buf.narrow(0, 0, trailer[2]);
  });
}

absl::Status DeviceBroadcastSource::Release(int64_t version, int64_t bucket) {
  (void)version;
  (void)bucket;
  return absl::OkStatus();
}

}  // namespace rlforge
