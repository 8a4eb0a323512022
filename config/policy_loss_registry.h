// The policy losses a language-model RL trainer minimises: one table, the only place in the
// code that names them.
//
// lm_rl.policy_loss (YAML) -> FindPolicyLoss -> PolicyLossKind (GrpoOptions::policy_loss; auto:
// the algorithm's AlgorithmSpec::default_policy_loss)
//   -> the loss:             trainer/policy_loss.cc, a switch over PolicyLossKind
//   -> its aggregation:      `default_loss_aggregation`, when lm_rl.loss_aggregation is auto
// The switch covers every enumerator without a default, so -Werror=switch turns a missed case
// into a compile error; AlgorithmRegistryTest checks the table. The accepted names, the config
// reference and the dispatch all read this table. docs/adding_an_algorithm.md ("A new policy
// loss") says which files a new loss touches.
//
// The table is immutable; every function here is thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/algorithm_registry.h"

namespace rlforge {

// With r = pi / pi_old per token and A the advantage (trainer/policy_loss.h).
enum class PolicyLossKind : int {
  kPpoClip,  // PPO's clipped surrogate per token: max(-A r, -A clip(r)) (GRPO, DAPO, Dr. GRPO)
  kGspo,     // GSPO: s = exp(mean_t log r) per sequence, clipped per sequence, GSPO-token form
  kCispo,    // CISPO: -sg(clip(r)) A log pi per token: the clipped weight never drops a gradient
};

struct PolicyLossSpec {
  PolicyLossKind kind;
  std::string name;     // lm_rl.policy_loss
  std::string summary;  // one sentence for docs/config.md
  // lm_rl.loss_aggregation `auto` for this loss; unset: the algorithm's default.
  std::optional<LossAggregation> default_loss_aggregation;
  // Whether lm_rl.clip_low 1 (a lower ratio bound of 0) means "no lower bound"; else clip_low
  // must be < 1.
  bool clip_low_one_unbounded = false;
};

// Every policy loss, in the order the docs list them.
const std::vector<PolicyLossSpec>& PolicyLosses();
// The entry named `name`, or null.
const PolicyLossSpec* FindPolicyLoss(std::string_view name);
// The entry of `kind`. Every enumerator has one (one missing aborts: a programming error).
const PolicyLossSpec& PolicyLossOf(PolicyLossKind kind);
// "ppo_clip, gspo, ..." for messages and docs.
std::vector<std::string> PolicyLossNames();

}  // namespace rlforge
