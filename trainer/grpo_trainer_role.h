// GrpoTrainerRole: the learner of GRPO jobs.
//
// GrpoTrain (groups + rewards) -> group advantages -> padded [B, T] batch -> policy (and
// frozen reference) token logprobs -> clipped loss (lm_losses.h) -> FlatAdamW -> new version
// published through shared memory (or inline) -> WeightsReady
//
// Starts from model.path, the same checkpoint the rollout workers load, so both hold
// version 0 at start. Synchronous: every sample in a batch comes from the version the
// trainer holds (the reply reports the logprob mismatch between engine and trainer).
#pragma once

#include <memory>
#include <optional>

#include "actors/role.h"
#include "models/transformer.h"
#include "trainer/flat_adamw.h"
#include "trainer/weight_sync.h"

namespace rlforge {

class GrpoTrainerRole final : public Role {
 public:
  static absl::StatusOr<std::unique_ptr<Role>> Create(const JobConfig& config,
                                                      const proto::Assignment& assignment);
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return version_; }

 private:
  explicit GrpoTrainerRole(const JobConfig& config) : config_(config) {}
  absl::StatusOr<WorkReply> Train(const proto::GrpoTrain& task,
                                  const std::vector<TensorFrame>& tensors);
  WorkReply Publish();

  JobConfig config_;
  std::optional<models::Transformer> policy_, reference_;
  std::unique_ptr<FlatAdamW> optimizer_;
  std::optional<WeightPublisher> publisher_;
  std::vector<float> flat_;
  int64_t version_ = 0;
};

}  // namespace rlforge
