// A control policy's weights on the bucket stream (weights/bucket_stream.h): the policy's flat
// fp32 vector (models/actor_critic.h: parameters, then buffers) as whole versions, the one
// factory of their publisher, and the one reader.
//
// trainer: MakePolicyPublisher(transport, options) -> Publish(version, flat) -> BucketWriter
//   (tensor by tensor, each bucket checksummed) -> WeightsReady {location, manifest, every
//   bucket's checksum, layout hash} (+ frame "weights", the stream, when inline)
// rollout worker: PolicyReader::Read(WeightsReady, frames) -> by location: "shm-mapped:/name"
//   (the segment, each bucket checked in place, the slot held while copied) or "inline" (the
//   frame, each bucket checked as it is unpacked: ReadVersion) -> its own flat vector
//
// shm is weights/shm_mapped.h's segment of two versions (by parity), which readers take at
// any time; a version is overwritten by the one after next once no reader holds it, and a
// reader holds it only while it copies. zmq sends the stream through the controller. gloo,
// cuda_ipc and nccl carry language models to engines only (config refuses them for PPO). Each
// object is used from one thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/weight_transport.h"
#include "proto/tensor_frame.h"
#include "weights/bucket_stream.h"
#include "weights/shm_mapped.h"

namespace rlforge {

// models/actor_critic.h's FlatLayout as the stream's tensors.
std::vector<TensorSpec> ToTensorSpecs(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& layout);

struct PolicyStreamOptions {
  std::string segment;              // shm: the segment's name, one per publisher ("/..." or not)
  std::vector<TensorSpec> tensors;  // the flat vector's tensors, in its order
  uint64_t layout_hash = 0;         // models/actor_critic.h's LayoutHash
  uint64_t bucket_bytes = 0;        // weights.bucket_mb in bytes (multiple of 64)
  double timeout_s = 120;           // weights.timeout_s: the longest wait for a slot
};

struct PublishedWeights {
  proto::WeightsReady ready;
  std::vector<TensorFrame> frames;  // inline: "weights", the stream's bytes
};

class PolicyPublisher {
 public:
  virtual ~PolicyPublisher() = default;
  // Publishes `flat` (every tensor's values, in options.tensors order) as `version`.
  virtual absl::StatusOr<PublishedWeights> Publish(int64_t version, const float* flat) = 0;
};

// The publisher of transport `t` (resolved: weights/weight_transport.h). An error naming
// weights.transport for a transport that carries no control policy.
absl::StatusOr<std::unique_ptr<PolicyPublisher>> MakePolicyPublisher(
    WeightTransport t, const PolicyStreamOptions& options);

class PolicyReader {
 public:
  // `who` (the worker's actor id) names it in errors and in the segment's reader table;
  // `tensors` and `layout_hash` describe its own flat vector.
  PolicyReader(std::string who, std::vector<TensorSpec> tensors, uint64_t layout_hash,
               double timeout_s);
  ~PolicyReader();
  // Copies `ready`'s version into `flat` (every tensor's values, in this reader's order);
  // `frames`: the message's (inline weights travel there). Errors name the worker, the version
  // and what did not match (layout, a tensor, a bucket's checksum).
  absl::StatusOr<ReadStats> Read(const proto::WeightsReady& ready,
                                 const std::vector<TensorFrame>& frames, float* flat);

 private:
  absl::StatusOr<ReadStats> ReadMapped(const proto::WeightsReady& ready,
                                       const std::vector<float*>& dest);
  absl::StatusOr<ReadStats> ReadInline(const proto::WeightsReady& ready,
                                       const std::vector<TensorFrame>& frames,
                                       const std::vector<float*>& dest);

  std::string who_;
  std::vector<TensorSpec> tensors_;
  uint64_t layout_hash_;
  double timeout_s_;
  std::string location_;  // of mapped_
  std::unique_ptr<MappedSource> mapped_;
};

}  // namespace rlforge
