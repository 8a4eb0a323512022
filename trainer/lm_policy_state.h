// LmPolicyState: what every language-model learner role holds: the trainer ranks' group, the
// policy loaded from model.path sharded over them, AdamW over this rank's shard, and (rank 0)
// the publisher that hands each new version to rollout workers.
//
// model.path -> sharded policy (version 0) -> [role's updates] -> ++version -> Publish():
//   gathered unit by unit -> rank 0 writes each into shared memory (one host; never a
//   second full copy) or into an inline "weights" frame (weights.transport: zmq)
//
// Also the padded [B, T] batch the learners score sequences with. One thread; owned by its role.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/role.h"
#include "config/job_config.h"
#include "dist/communicator.h"
#include "models/transformer.h"
#include "proto/lm_groups.h"
#include "trainer/flat_adamw.h"
#include "trainer/sharded_model.h"
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

// Hidden states [S, R, H] that predict each response token. (A sharded model's forward
// runs between its BeginForward and FinishBackward / EndForward.)
torch::Tensor GroupHidden(models::Transformer& model, const GroupBatch& b);

// Logprobs [S, R] of the response tokens under `model` (with gradient unless under
// NoGradGuard); the logits [S, R, V] they came from into *logits_out when given.
absl::StatusOr<torch::Tensor> GroupTokenLogprobs(models::Transformer& model, const GroupBatch& b,
                                                 torch::Tensor* logits_out = nullptr);

// Logprobs [S, R] of the response tokens under a sharded model, without gradient: gathers
// around the forward and frees after. Every rank calls it (collectives).
absl::StatusOr<torch::Tensor> ScoreTokenLogprobs(ShardedModel& model, const GroupBatch& b);

// A frozen copy of model.path (no gradient, eval mode) sharded over `comm`: the reference.
absl::StatusOr<std::unique_ptr<ShardedModel>> LoadFrozenReference(const JobConfig& config,
                                                                  dist::Communicator* comm);

class LmPolicyState {
 public:
  // Joins the trainer ranks, loads model.path sharded over them, sets the seed and thread
  // count, builds AdamW over this rank's shard with trainer.* and, on rank 0, the publisher
  // (shared memory named after this process and actor unless weights.transport is zmq).
  // Catches libtorch's exceptions.
  static absl::StatusOr<std::unique_ptr<LmPolicyState>> Create(const JobConfig& config,
                                                               const proto::Assignment& assignment);
  ~LmPolicyState();

  dist::Communicator& comm() { return *comm_; }
  ShardedModel& policy() { return *policy_; }
  FlatAdamW& optimizer() { return *optimizer_; }
  int64_t version() const { return version_; }

  // trainer.lr_schedule at the next optimiser step (counted here), set on the optimiser.
  double NextLearningRate(int64_t total_steps);
  // Clip by the global norm over ranks, step; returns the norm before clipping.
  double Step(double max_grad_norm);
  // Marks a new version (after the role's updates) and publishes it. Every rank calls it:
  // the full weights are gathered unit by unit and rank 0 streams them into the weight
  // transport; only rank 0's reply carries them.
  absl::StatusOr<WorkReply> PublishNewVersion();
  // Publishes the current version again (e.g. no update this time).
  absl::StatusOr<WorkReply> Publish();
  int64_t weight_bytes() const { return flat_numel_ * static_cast<int64_t>(sizeof(float)); }

 private:
  explicit LmPolicyState(const JobConfig& config) : config_(config) {}

  const JobConfig& config_;
  std::unique_ptr<dist::Communicator> comm_;  // outlives the models that use it
  std::unique_ptr<ShardedModel> policy_;
  std::unique_ptr<FlatAdamW> optimizer_;
  std::optional<WeightPublisher> publisher_;
  std::map<std::string, int64_t> flat_offset_;  // parameter -> offset in the weight layout
  int64_t flat_numel_ = 0;
  uint64_t layout_hash_ = 0;
  int64_t version_ = 0;
  int64_t optimizer_steps_ = 0;
};

}  // namespace rlforge
