// RewardRole: the "reward" actor. Scores the batches the controller sends.
//
// WorkRequest.score (samples) -> RewardSet::Score -> WorkResult.score (per-sample totals,
//   status and errors, per-reward scores) + metrics (reward/<name>/mean, ...)
//
// Failed samples are logged (the first few per batch) and returned with ok=false and their
// error; the request itself only fails when it is not a score task.
#pragma once

#include "actors/role.h"
#include "reward/reward_set.h"

namespace rlforge::reward {

class RewardRole final : public Role {
 public:
  // Builds the rewards of config.reward; a bad one is an error naming it.
  static absl::StatusOr<std::unique_ptr<Role>> Create(const JobConfig& config,
                                                      const proto::Assignment& assignment);

  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;

 private:
  RewardRole(RewardSet set, std::string actor_id)
      : set_(std::move(set)), actor_id_(std::move(actor_id)) {}
  RewardSet set_;
  std::string actor_id_;
};

// Conversions between the wire messages and the scorer's types. The reward worker uses
// SamplesFromProto and ScoresToProto; the controller builds requests with SamplesToProto and
// reads replies with ScoresFromProto (which checks that every list has one entry per sample).
std::vector<Sample> SamplesFromProto(const proto::ScoreTask& task);
void ScoresToProto(const BatchScores& scores, proto::ScoreResult* out);
void SamplesToProto(const std::vector<Sample>& samples, proto::ScoreTask* out);
absl::StatusOr<BatchScores> ScoresFromProto(const proto::ScoreResult& result, size_t num_samples);

}  // namespace rlforge::reward
