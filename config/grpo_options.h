// Sections of language-model RL jobs: `lm_rl:` (sampling, policy loss, evaluation;
// used by grpo, drgrpo, rloo and lm_ppo), `critic:` (lm_ppo's value model and GAE), `dpo:`
// (preference optimisation).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/algorithm_registry.h"
#include "config/answer_check.h"
#include "config/choices.h"

namespace rlforge {

// The `lm_rl:` section (formerly `grpo:`, still accepted); the member keeps the name
// JobConfig::grpo.
struct GrpoOptions {
  int64_t prompts_per_iteration = 16;
  int64_t group_size = 8;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  int64_t max_new_tokens = 8;
  double clip_low = 0.2;
  double clip_high = 0.28;
  double dual_clip = 0;
  double kl_beta = 0.0;
  KlEstimator kl_estimator = KlEstimator::kK3;
  // unset (auto): AlgorithmSpec::default_policy_loss, filled in once the algorithm is known
  // (config/policy_loss_registry.h).
  std::optional<PolicyLossKind> policy_loss;
  // unset (auto): PolicyLossSpec::default_loss_aggregation, else
  // AlgorithmSpec::default_loss_aggregation, filled in once the algorithm is known.
  std::optional<LossAggregation> loss_aggregation;
  bool filter_degenerate = false;
  bool skip_zero_advantage = true;
  int64_t epochs = 1;
  int64_t minibatches = 1;
  int64_t eval_every = 5;
  int64_t eval_examples = 200;
  AnswerCheck eval_verifier = AnswerCheck::kExact;
  int64_t stream_groups = 4;
  OffPolicyCorrection off_policy = OffPolicyCorrection::kNone;
  double is_cap = 2.0;
};

// lm_rl.loss_aggregation, which loading resolves for every kLmRl algorithm (auto: the policy
// loss's or the algorithm's default); an error for a config that never went through loading.
inline absl::StatusOr<LossAggregation> LossAggregationOf(const GrpoOptions& g) {
  if (g.loss_aggregation.has_value()) return *g.loss_aggregation;
  return absl::FailedPreconditionError(
      "lm_rl.loss_aggregation: auto was never resolved (load the job with LoadJobFile)");
}

// lm_ppo: a critic initialised from model.path with a fresh value head, trained beside the
// policy with its own AdamW; token-level GAE over each response.
struct CriticOptions {
  double lr = 5e-4;
  double value_clip = 0.2;  // 0: unclipped value loss
  double gamma = 1.0;
  double lambda = 0.95;
  bool whiten_advantages = true;
  int64_t warmup_iterations = 0;  // iterations that train only the critic
};

// dpo: offline preference pairs built from the task each iteration.
struct DpoJobOptions {
  int64_t pairs_per_iteration = 32;
  double beta = 0.1;
  DpoLossType loss_type = DpoLossType::kSigmoid;
  double label_smoothing = 0;
  DpoRejected rejected = DpoRejected::kCarryless;
  int64_t epochs = 1;
  int64_t eval_every = 10;
  int64_t eval_examples = 200;
  int64_t max_new_tokens = 8;
};

}  // namespace rlforge
