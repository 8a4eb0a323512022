// The trainer actor for PPO on control policies.
//
// TrainInit(spec, resolved transport) -> model + optimiser -> publish version 0
// TrainStep + batch tensors -> PpoLearner::Update -> publish version v+1
//
// Weights go out on the bucket stream through the publisher weights/policy_plane.h makes for
// the transport: the shared-memory segment of two versions (shm), or inline as a frame
// "weights" in the reply (zmq, the path for other hosts).
#pragma once

#include <memory>

#include "actors/role.h"
#include "trainer/ppo_learner.h"
#include "weights/policy_plane.h"

namespace rlforge {

class PpoTrainerRole final : public Role {
 public:
  PpoTrainerRole(const JobConfig& config, const proto::Assignment& assignment);
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return learner_ ? learner_->version() : -1; }

 private:
  absl::StatusOr<WorkReply> Init(const proto::TrainInit& init);
  absl::StatusOr<WorkReply> Step(const proto::TrainStep& step, std::vector<TensorFrame> tensors);
  absl::StatusOr<WorkReply> Publish();
  // Whole-job checkpoints: the learner's state in dir/learner.pt; LoadState publishes the
  // restored version.
  absl::StatusOr<WorkReply> SaveState(const proto::SaveState& save);
  absl::StatusOr<WorkReply> LoadState(const proto::LoadState& load);

  JobConfig config_;
  proto::Assignment assignment_;
  std::unique_ptr<PpoLearner> learner_;
  proto::PolicySpec spec_;
  std::unique_ptr<PolicyPublisher> publisher_;
  std::vector<float> flat_;
};

}  // namespace rlforge
