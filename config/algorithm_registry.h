// The algorithms rlforge runs: one table, and the only place in the code that names them.
//
// job.algorithm (YAML) -> FindAlgorithm -> const AlgorithmSpec* (JobOptions::algorithm)
//   -> controller loop:      controller/algorithm.cc, a switch over `family`
//   -> actor roles:          cli/role_registry.cc, a switch over `family`
//   -> LM advantage:         trainer/advantage_estimator.cc, a switch over `advantage`
//   -> LM policy loss:       `default_policy_loss`, when lm_rl.policy_loss is auto
//                            (config/policy_loss_registry.h)
// Every switch covers every enumerator without a default, so -Werror=switch turns a missed
// case into a compile error; AlgorithmRegistryTest checks the table itself. The accepted
// names, the config reference and the dispatch all read this table, so they cannot disagree;
// the capability flags answer what other code would otherwise ask by testing `family`.
// docs/adding_an_algorithm.md says which files a new algorithm touches.
//
// The table is immutable; every function here is thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/choices.h"

namespace rlforge {

// Which controller loop and which trainer role run the job.
enum class AlgorithmFamily {
  kEcho,        // transport self-test
  kControlPpo,  // PPO on simulators (MLP actor-critic)
  kSft,         // supervised fine-tuning of a language model
  kLmRl,        // on-policy RL of a language model: generate, score, advantage, clipped loss
  kDpo,         // preference optimisation of a language model
};

// How a kLmRl trainer turns a batch's rewards into advantages (trainer/advantage_estimator.h).
enum class AdvantageKind {
  kNone,         // not a kLmRl algorithm
  kGroupNorm,    // GRPO: (r - group mean) / group std
  kGroupMean,    // Dr. GRPO: r - group mean (no std division)
  kLeaveOneOut,  // RLOO: r - mean of the other samples of the group
  kTokenGae,     // PPO: a critic and token-level GAE, KL as a per-token reward penalty
};

// The policy losses' enum (config/policy_loss_registry.h), declared here so that adding a loss
// does not recompile every includer of this table.
enum class PolicyLossKind : int;

struct AlgorithmSpec {
  std::string name;     // job.algorithm
  std::string summary;  // one sentence for docs/config.md
  AlgorithmFamily family;
  AdvantageKind advantage = AdvantageKind::kNone;
  // kLmRl: lm_rl.loss_aggregation when neither the job file nor the policy loss sets it.
  LossAggregation default_loss_aggregation = LossAggregation::kTokenMean;
  // kLmRl: lm_rl.policy_loss when the job file does not set it (auto); unset for the others.
  std::optional<PolicyLossKind> default_policy_loss = std::nullopt;
  // Roles the job starts (the loop's Roles() gives their counts from config).
  std::vector<std::string> roles;
  // Job-file sections the algorithm reads besides job, controller, launch, trainer and
  // dashboard. Writing another algorithm's section is an error.
  std::vector<std::string> sections;

  // Capabilities: what the rest of the code asks of an algorithm, in place of tests of its
  // family. AlgorithmRegistryTest checks them against the family and the sections.
  bool lm_engines = false;       // language-model rollout engines generate its data, and the
                                 // trainer streams each version's weights to them
  bool async_rollout = false;    // may run rollout ahead of training (rollout.max_staleness)
  bool has_critic = false;       // trains a value model beside the policy
  bool needs_reference = false;  // always holds a frozen reference policy (the kLmRl ones
                                 // hold one only when lm_rl.kl_beta > 0)
  bool uses_groups = false;      // its advantage compares the samples of a prompt's group

  // Whether the algorithm reads job-file section `section`.
  bool Reads(std::string_view section) const;
  // Whether the job starts actors of role `role` (common/role_names.h).
  bool Starts(std::string_view role) const;
};

// Every algorithm, in the order the docs list them.
const std::vector<AlgorithmSpec>& Algorithms();
// The entry named `name`, or null.
const AlgorithmSpec* FindAlgorithm(std::string_view name);
// "echo, ppo, ..." for messages and docs.
std::vector<std::string> AlgorithmNames();
// Whether `section` belongs to some algorithm's `sections` (so it is not shared).
bool IsAlgorithmSection(std::string_view section);

}  // namespace rlforge
