// Sections of language-model RL jobs: `grpo:` (sampling, clipped policy loss, evaluation;
// used by grpo and lm_ppo), `critic:` (lm_ppo's value model and GAE), `dpo:` (preference
// optimisation).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/algorithm_registry.h"
#include "config/answer_check.h"

namespace rlforge {

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
  std::string kl_estimator = "k3";
  // unset (auto): AlgorithmSpec::default_policy_loss, filled in once the algorithm is known
  // (config/policy_loss_registry.h).
  std::optional<PolicyLossKind> policy_loss;
  // auto: PolicyLossSpec::default_loss_aggregation, else AlgorithmSpec::default_loss_aggregation
  std::string loss_aggregation = "auto";
  bool filter_degenerate = false;
  bool skip_zero_advantage = true;
  int64_t epochs = 1;
  int64_t minibatches = 1;
  int64_t eval_every = 5;
  int64_t eval_examples = 200;
  AnswerCheck eval_verifier = AnswerCheck::kExact;
  int64_t stream_groups = 4;
  std::string off_policy = "none";  // none | decoupled | tis | mask (trainer/lm_losses.h)
  double is_cap = 2.0;
};

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
  std::string loss_type = "sigmoid";  // sigmoid | ipo
  double label_smoothing = 0;
  std::string rejected = "carryless";  // carryless | random
  int64_t epochs = 1;
  int64_t eval_every = 10;
  int64_t eval_examples = 200;
  int64_t max_new_tokens = 8;
};

}  // namespace rlforge
