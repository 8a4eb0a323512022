// Direct preference optimisation losses on sequence logprobs of (chosen, rejected) pairs.
//
// token logprobs [B, T] + response mask [B, T] -> SequenceLogprobs [B]
// policy chosen/rejected [B] + reference chosen/rejected [B] -> DpoLoss
//
// The reference model is frozen: compute its sequence logprobs once per pair (under
// torch::NoGradGuard, e.g. when the dataset is built) and pass them in every epoch.
#pragma once

#include <torch/torch.h>

#include <string_view>

#include "absl/status/statusor.h"
#include "config/choices.h"

namespace rlforge {

// sum_t(token_logp * mask) per sequence [B]; with average, divided by the number of response
// tokens (clamped to >= 1), as IPO is usually run on length-averaged logprobs.
absl::StatusOr<torch::Tensor> SequenceLogprobs(const torch::Tensor& token_logp,
                                               const torch::Tensor& mask, bool average = false);

// DpoLossType (config/choices.h, dpo.loss_type): sigmoid or ipo.

struct DpoOptions {
  DpoLossType type = DpoLossType::kSigmoid;
  double beta = 0.1;           // > 0
  double label_smoothing = 0;  // in [0, 0.5), sigmoid only
};

struct DpoInput {
  torch::Tensor chosen_logp;        // [B] policy, with gradient
  torch::Tensor rejected_logp;      // [B] policy, with gradient
  torch::Tensor ref_chosen_logp;    // [B] frozen reference
  torch::Tensor ref_rejected_logp;  // [B] frozen reference
};

struct DpoLoss {
  torch::Tensor loss;              // scalar: mean of losses
  torch::Tensor losses;            // [B] per pair (with gradient)
  torch::Tensor chosen_rewards;    // [B] beta * (chosen - ref_chosen), detached
  torch::Tensor rejected_rewards;  // [B] beta * (rejected - ref_rejected), detached
  double chosen_reward = 0;        // means of the above
  double rejected_reward = 0;
  double margin = 0;    // mean(chosen_rewards - rejected_rewards)
  double accuracy = 0;  // share of pairs with chosen_rewards > rejected_rewards
};

// h = (chosen - rejected) - (ref_chosen - ref_rejected), the policy's log-ratio margin over
// the reference's; the loss is a function of h per DpoLossType.
absl::StatusOr<DpoLoss> ComputeDpoLoss(const DpoInput& in, const DpoOptions& options);

}  // namespace rlforge
