#include "config/algorithm_registry.h"

#include <algorithm>

#include "common/role_names.h"
#include "config/policy_loss_registry.h"

namespace rlforge {

namespace {

// The sections every language-model RL job reads, and `extra`.
std::vector<std::string> LmRlSections(std::vector<std::string> extra = {}) {
  std::vector<std::string> s = {"rollout", "engine", "lm_rl", "reward", "model", "data", "weights"};
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}

// An on-policy RL algorithm of a language model: what they all share, and what sets it apart.
AlgorithmSpec LmRl(std::string name, std::string summary, AdvantageKind advantage,
                   LossAggregation aggregation, std::vector<std::string> extra_sections = {}) {
  const bool critic = advantage == AdvantageKind::kTokenGae;
  return {.name = std::move(name),
          .summary = std::move(summary),
          .family = AlgorithmFamily::kLmRl,
          .advantage = advantage,
          .default_loss_aggregation = aggregation,
          .default_policy_loss = PolicyLossKind::kPpoClip,
          .roles = {kTrainerRole, kRolloutRole, kRewardRole},
          .sections = LmRlSections(std::move(extra_sections)),
          .lm_engines = true,
          .async_rollout = true,
          .has_critic = critic,
          .uses_groups = !critic};
}

std::vector<AlgorithmSpec> BuildTable() {
  return {
      {.name = "echo",
       .summary = "the transport self-test: random tensors to every echo actor and back",
       .family = AlgorithmFamily::kEcho,
       .roles = {kEchoRole},
       .sections = {"echo"}},
      {.name = "ppo",
       .summary = "PPO for control policies in simulators",
       .family = AlgorithmFamily::kControlPpo,
       .roles = {kTrainerRole, kRolloutRole},
       .sections = {"env", "sim", "rollout", "policy", "ppo", "weights"},
       .async_rollout = true,
       .has_critic = true},
      {.name = "sft",
       .summary = "supervised fine-tuning of a language model",
       .family = AlgorithmFamily::kSft,
       .roles = {kTrainerRole},
       .sections = {"sft", "model", "data"}},
      LmRl("grpo", "RL of a language model on a verifiable task, group-normalised advantages",
           AdvantageKind::kGroupNorm, LossAggregation::kTokenMean),
      LmRl("drgrpo",
           "GRPO done right (Dr. GRPO): advantages not divided by the group's std, losses summed "
           "over tokens over a constant length",
           AdvantageKind::kGroupMean, LossAggregation::kSeqMeanTokenSumNorm),
      LmRl("rloo",
           "REINFORCE leave-one-out: each sample's baseline is the mean reward of the other "
           "samples of its group",
           AdvantageKind::kLeaveOneOut, LossAggregation::kTokenMean),
      LmRl("lm_ppo",
           "PPO for a language model: a critic, token-level GAE, the KL as a reward penalty",
           AdvantageKind::kTokenGae, LossAggregation::kTokenMean, {"critic"}),
      {.name = "dpo",
       .summary = "preference optimisation of a language model",
       .family = AlgorithmFamily::kDpo,
       .roles = {kTrainerRole, kRolloutRole, kRewardRole},
       .sections = {"dpo", "rollout", "engine", "reward", "model", "data", "weights"},
       .lm_engines = true,
       .needs_reference = true},
  };
}

}  // namespace

const std::vector<AlgorithmSpec>& Algorithms() {
  static const std::vector<AlgorithmSpec> table = BuildTable();
  return table;
}

const AlgorithmSpec* FindAlgorithm(std::string_view name) {
  for (const AlgorithmSpec& a : Algorithms()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::vector<std::string> AlgorithmNames() {
  std::vector<std::string> names;
  for (const AlgorithmSpec& a : Algorithms()) names.emplace_back(a.name);
  return names;
}

bool AlgorithmSpec::Reads(std::string_view section) const {
  return std::find(sections.begin(), sections.end(), section) != sections.end();
}

bool AlgorithmSpec::Starts(std::string_view role) const {
  return std::find(roles.begin(), roles.end(), role) != roles.end();
}

bool IsAlgorithmSection(std::string_view section) {
  for (const AlgorithmSpec& a : Algorithms()) {
    if (std::find(a.sections.begin(), a.sections.end(), section) != a.sections.end()) return true;
  }
  return false;
}

}  // namespace rlforge
