#include "config/policy_loss_registry.h"

#include <cstdlib>

namespace rlforge {

namespace {

std::vector<PolicyLossSpec> BuildTable() {
  return {
      {PolicyLossKind::kPpoClip, "ppo_clip",
       "PPO's clipped surrogate per token, max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), "
       "with dual clip, off-policy corrections and the KL term",
       std::nullopt, false},
      {PolicyLossKind::kGspo, "gspo",
       "GSPO (Zheng et al. 2025): one ratio per sequence, s = exp(mean_t log r), clipped per "
       "sequence (the paper's clip_low / clip_high are 3e-4 / 4e-4) and applied to every token",
       LossAggregation::kSeqMeanTokenMean, false},
      {PolicyLossKind::kCispo, "cispo",
       "CISPO (MiniMax-M1, 2025): REINFORCE weighted by the clipped, stop-gradient ratio, "
       "-sg(clip(r, 1 - clip_low, 1 + clip_high)) A log pi per token; clip_low 1 is no lower "
       "bound, the paper's choice",
       LossAggregation::kTokenMean, true},
  };
}

}  // namespace

const std::vector<PolicyLossSpec>& PolicyLosses() {
  static const std::vector<PolicyLossSpec> table = BuildTable();
  return table;
}

const PolicyLossSpec* FindPolicyLoss(std::string_view name) {
  for (const PolicyLossSpec& l : PolicyLosses()) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

const PolicyLossSpec& PolicyLossOf(PolicyLossKind kind) {
  for (const PolicyLossSpec& l : PolicyLosses()) {
    if (l.kind == kind) return l;
  }
  // An enumerator without an entry: a programming error no input can cause, found by the
  // first test that loads a job naming the loss.
  std::abort();
}

std::vector<std::string> PolicyLossNames() {
  std::vector<std::string> names;
  for (const PolicyLossSpec& l : PolicyLosses()) names.emplace_back(l.name);
  return names;
}

}  // namespace rlforge
