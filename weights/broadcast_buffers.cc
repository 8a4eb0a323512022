#include "weights/broadcast_buffers.h"

#include "common/status.h"

namespace rlforge {

BroadcastBuffers::BroadcastBuffers(dist::Communicator* comm, int64_t buffer_bytes,
                                   torch::TensorOptions options)
    : comm_(comm) {
  for (auto& b : buf_) b = torch::empty({buffer_bytes}, options.dtype(torch::kUInt8));
}

BroadcastBuffers::~BroadcastBuffers() {
  for (int slot = 0; slot < 2; ++slot) Settle(slot).IgnoreError();
}

absl::Status BroadcastBuffers::Settle(int slot) {
  if (pending_[slot] == nullptr) return absl::OkStatus();
  absl::Status s = pending_[slot]->Wait();
  pending_[slot].reset();
  return s;
}

absl::StatusOr<torch::Tensor> BroadcastBuffers::Free(int64_t bucket) {
  const int slot = static_cast<int>(bucket % 2);
  RETURN_IF_ERROR(Settle(slot));
  return buf_[slot];
}

void BroadcastBuffers::Send(int64_t bucket) {
  const int slot = static_cast<int>(bucket % 2);
  pending_[slot] = comm_->Broadcast(buf_[slot], 0);
}

absl::Status BroadcastBuffers::Drain() {
  for (int slot = 0; slot < 2; ++slot) RETURN_IF_ERROR(Settle(slot));
  return absl::OkStatus();
}

void BroadcastBuffers::Post(int64_t bucket) {
  pending_[bucket % 2] = comm_->Broadcast(buf_[bucket % 2], 0);
  posted_ = bucket + 1;
}

absl::Status BroadcastBuffers::Begin(int64_t buckets) {
  for (auto& p : pending_) {
    if (p != nullptr) return absl::InternalError("a broadcast of the last version is unfinished");
  }
  buckets_ = buckets;
  posted_ = 0;
  if (buckets > 0) Post(0);
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> BroadcastBuffers::Receive(int64_t bucket) {
  if (bucket >= posted_) Post(bucket);
  const int slot = static_cast<int>(bucket % 2);
  RETURN_IF_ERROR(Settle(slot));
  if (bucket + 1 < buckets_ && posted_ == bucket + 1) Post(bucket + 1);
  return buf_[slot];
}

}  // namespace rlforge
