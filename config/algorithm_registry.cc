#include "config/algorithm_registry.h"

#include <algorithm>

namespace rlforge {

namespace {

// Sections every language-model RL job reads.
#define RLFORGE_LM_RL_SECTIONS "rollout", "engine", "grpo", "reward", "model", "data", "weights"

std::vector<AlgorithmSpec> BuildTable() {
  return {
      {"echo",
       "the transport self-test: random tensors to every echo actor and back",
       AlgorithmFamily::kEcho,
       AdvantageKind::kNone,
       "",
       {"echo"},
       {"echo"}},
      {"ppo",
       "PPO for control policies in simulators",
       AlgorithmFamily::kControlPpo,
       AdvantageKind::kNone,
       "",
       {"trainer", "rollout"},
       {"env", "sim", "rollout", "policy", "ppo", "weights"}},
      {"sft",
       "supervised fine-tuning of a language model",
       AlgorithmFamily::kSft,
       AdvantageKind::kNone,
       "",
       {"trainer"},
       {"sft", "model", "data"}},
      {"grpo",
       "RL of a language model on a verifiable task, group-normalised advantages",
       AlgorithmFamily::kLmRl,
       AdvantageKind::kGroupNorm,
       "token-mean",
       {"trainer", "rollout", "reward"},
       {RLFORGE_LM_RL_SECTIONS}},
      {"drgrpo",
       "GRPO done right (Dr. GRPO): advantages not divided by the group's std, "
       "losses summed over tokens over a constant length",
       AlgorithmFamily::kLmRl,
       AdvantageKind::kGroupMean,
       "seq-mean-token-sum-norm",
       {"trainer", "rollout", "reward"},
       {RLFORGE_LM_RL_SECTIONS}},
      {"rloo",
       "REINFORCE leave-one-out: each sample's baseline is the mean reward of the "
       "other samples of its group",
       AlgorithmFamily::kLmRl,
       AdvantageKind::kLeaveOneOut,
       "token-mean",
       {"trainer", "rollout", "reward"},
       {RLFORGE_LM_RL_SECTIONS}},
      {"lm_ppo",
       "PPO for a language model: a critic, token-level GAE, the KL as a reward penalty",
       AlgorithmFamily::kLmRl,
       AdvantageKind::kTokenGae,
       "token-mean",
       {"trainer", "rollout", "reward"},
       {RLFORGE_LM_RL_SECTIONS, "critic"}},
      {"dpo",
       "preference optimisation of a language model",
       AlgorithmFamily::kDpo,
       AdvantageKind::kNone,
       "",
       {"trainer", "rollout", "reward"},
       {"dpo", "rollout", "engine", "reward", "model", "data", "weights"}},
  };
}

#undef RLFORGE_LM_RL_SECTIONS

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
