// LmPolicyState: what every language-model learner role holds: the policy loaded from
// model.path, its FlatAdamW, and the publisher that hands each new version to rollout workers.
//
// model.path -> policy (version 0) -> [role's updates] -> ++version -> Publish(): flat copy ->
//   shared memory (one host) or an inline "weights" frame (weights.transport: zmq)
//
// Also the padded [B, T] batch the learners score sequences with. One thread; owned by its role.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/role.h"
#include "config/job_config.h"
#include "models/transformer.h"
#include "proto/lm_groups.h"
#include "trainer/flat_adamw.h"
#include "weights/weight_sync.h"

namespace rlforge {

// Groups packed one row each: [prompt, response 1, ..., response n]. The responses attend
// to their shared prompt (Hidden's shared_segment) and to themselves, so the prompt is
// computed once per group instead of n times, and nothing is padded but each row's tail.
// The math is that of n separate prompt + response sequences (tested against it).
//
// Per-token tensors are response-major, [S, R]: S samples in group order, R the longest
// response; column j is the sample's response token j (mask 1), predicted by the hidden
// state at `source` (the prompt's last token for j = 0).
struct GroupBatch {
  torch::Tensor tokens, positions, segments, shared;  // [G, L]
  torch::Tensor source;                               // [S, R] int64 into the [G * L] states
  torch::Tensor targets, mask, old_logp;              // [S, R]
};

// Fails, naming the request, when a group's prompt is empty (nothing predicts its first
// response token).
absl::StatusOr<GroupBatch> PackGroups(const std::vector<LmGroup>& groups);

// Hidden states [S, R, H] that predict each response token.
torch::Tensor GroupHidden(models::Transformer& model, const GroupBatch& b);

// Logprobs [S, R] of the response tokens under `model` (with gradient unless under
// NoGradGuard); the logits [S, R, V] they came from into *logits_out when given.
absl::StatusOr<torch::Tensor> GroupTokenLogprobs(models::Transformer& model, const GroupBatch& b,
                                                 torch::Tensor* logits_out = nullptr);

// A frozen copy of model.path (no gradient, eval mode): the reference policy.
absl::StatusOr<models::Transformer> LoadFrozenReference(const JobConfig& config);

class LmPolicyState {
 public:
  // Loads model.path, sets the seed and thread count, builds AdamW with trainer.* and the
  // publisher (shared memory named after this process and actor unless weights.transport
  // is zmq). Catches libtorch's exceptions.
  static absl::StatusOr<std::unique_ptr<LmPolicyState>> Create(
      const JobConfig& config, const proto::Assignment& assignment);

  models::Transformer& policy() { return policy_; }
  FlatAdamW& optimizer() { return *optimizer_; }
  int64_t version() const { return version_; }

  // trainer.lr_schedule at the next optimiser step (counted here), set on the optimiser.
  double NextLearningRate(int64_t total_steps);
  // Clip, step; returns the gradient norm before clipping.
  double Step(double max_grad_norm);
  // Marks a new version (after the role's updates) and publishes it.
  WorkReply PublishNewVersion();
  // Publishes the current version again (e.g. no update this time).
  WorkReply Publish();
  int64_t weight_bytes() const { return static_cast<int64_t>(flat_.size() * sizeof(float)); }

 private:
  LmPolicyState(const JobConfig& config, models::Transformer policy)
      : config_(config), policy_(std::move(policy)) {}

  const JobConfig& config_;
  models::Transformer policy_;
  std::unique_ptr<FlatAdamW> optimizer_;
  std::optional<WeightPublisher> publisher_;
  std::vector<float> flat_;
  int64_t version_ = 0;
  int64_t optimizer_steps_ = 0;
};

}  // namespace rlforge
