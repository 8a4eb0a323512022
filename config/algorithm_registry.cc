#include "config/algorithm_registry.h"

#include <algorithm>

#include "config/policy_loss_registry.h"

namespace rlforge {

namespace {

// The sections every language-model RL job reads, and `extra`.
std::vector<std::string> LmRlSections(std::vector<std::string> extra = {}) {
  std::vector<std::string> s = {"rollout", "engine", "grpo", "reward", "model", "data", "weights"};
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}

std::vector<AlgorithmSpec> BuildTable() {
  return {
      {"echo",
       "the transport self-test: random tensors to every echo actor and back",
       AlgorithmFamily::kEcho,
       AdvantageKind::kNone,
       "",
       std::nullopt,
       {"echo"},
       {"echo"}},
      {"ppo",
       "PPO for control policies in simulators",
       AlgorithmFamily::kControlPpo,
       AdvantageKind::kNone,
       "",
       std::nullopt,
       {"trainer", "rollout"},
       {"env", "sim", "rollout", "policy", "ppo", "weights"}},
      {"sft",
       "supervised fine-tuning of a language model",
       AlgorithmFamily::kSft,
       AdvantageKind::kNone,
       "",
       std::nullopt,
       {"trainer"},
       {"sft", "model", "data"}},
      {"grpo",
       "RL of a language model on a verifiable task, group-normalised advantages",
       AlgorithmFamily::kLmRl,
       AdvantageKind::kGroupNorm,
       "token-mean",
       PolicyLossKind::kPpoClip,
       {"trainer", "rollout", "reward"},
       LmRlSections()},
      {"drgrpo",
       "GRPO done right (Dr. GRPO): advantages not divided by the group's std, "
       "losses summed over tokens over a constant length",
       AlgorithmFamily::kLmRl,
       AdvantageKind::kGroupMean,
       "seq-mean-token-sum-norm",
       PolicyLossKind::kPpoClip,
       {"trainer", "rollout", "reward"},
       LmRlSections()},
      {"rloo",
       "REINFORCE leave-one-out: each sample's baseline is the mean reward of the "
       "other samples of its group",
       AlgorithmFamily::kLmRl,
       AdvantageKind::kLeaveOneOut,
       "token-mean",
       PolicyLossKind::kPpoClip,
       {"trainer", "rollout", "reward"},
       LmRlSections()},
      {"lm_ppo",
       "PPO for a language model: a critic, token-level GAE, the KL as a reward penalty",
       AlgorithmFamily::kLmRl,
       AdvantageKind::kTokenGae,
       "token-mean",
       PolicyLossKind::kPpoClip,
       {"trainer", "rollout", "reward"},
       LmRlSections({"critic"})},
      {"dpo",
       "preference optimisation of a language model",
       AlgorithmFamily::kDpo,
       AdvantageKind::kNone,
       "",
       std::nullopt,
       {"trainer", "rollout", "reward"},
       {"dpo", "rollout", "engine", "reward", "model", "data", "weights"}},
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

bool NeedsGroups(AdvantageKind kind) {
  switch (kind) {
    case AdvantageKind::kGroupNorm:
    case AdvantageKind::kGroupMean:
    case AdvantageKind::kLeaveOneOut:
      return true;
    case AdvantageKind::kNone:
    case AdvantageKind::kTokenGae:
      return false;
  }
  return false;
}

bool IsAlgorithmSection(std::string_view section) {
  for (const AlgorithmSpec& a : Algorithms()) {
    if (std::find(a.sections.begin(), a.sections.end(), section) != a.sections.end()) return true;
  }
  return false;
}

}  // namespace rlforge
