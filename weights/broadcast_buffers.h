// The two buffers of a bucket stream over a broadcast group, each with at most one broadcast in
// flight: the publisher (rank 0) fills one while the other is sent; an engine unpacks one while
// the next bucket arrives in the other. gloo_plane (host buffers) and device_broadcast (device
// buffers) share it and differ only in where the buffers live and what trailer ends a bucket.
//
// Every wait is the group's (its deadline). One thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "dist/communicator.h"

namespace rlforge {

class BroadcastBuffers {
 public:
  // `comm` outlives the buffers; each buffer holds `buffer_bytes` bytes of `options` (uint8).
  BroadcastBuffers(dist::Communicator* comm, int64_t buffer_bytes, torch::TensorOptions options);
  ~BroadcastBuffers();  // waits for any broadcast in flight

  // Publisher: `bucket`'s buffer, once the broadcast it last held finished.
  absl::StatusOr<torch::Tensor> Free(int64_t bucket);
  // Publisher: broadcasts `bucket`'s buffer, filled since Free.
  void Send(int64_t bucket);
  // Publisher: waits for every broadcast sent.
  absl::Status Drain();

  // Engine: a version of `buckets` buckets starts; the first receive is posted.
  absl::Status Begin(int64_t buckets);
  // Engine: `bucket`'s buffer once it arrived; the next bucket's receive is posted meanwhile
  // (into the other buffer, released with bucket - 1).
  absl::StatusOr<torch::Tensor> Receive(int64_t bucket);

 private:
  void Post(int64_t bucket);
  absl::Status Settle(int slot);  // waits slot's broadcast, if one is posted

  dist::Communicator* comm_;  // not owned
  torch::Tensor buf_[2];
  std::unique_ptr<dist::Pending> pending_[2];
  int64_t buckets_ = 0;
  int64_t posted_ = 0;  // receives of this version posted so far
};

}  // namespace rlforge
