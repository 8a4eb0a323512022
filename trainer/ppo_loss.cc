#include "trainer/ppo_loss.h"

#include <limits>

namespace rlforge {

PolicyLoss ClippedPolicyLoss(const torch::Tensor& new_logp, const torch::Tensor& old_logp,
                             const torch::Tensor& advantages, double clip) {
  auto log_ratio = new_logp - old_logp;
  auto ratio = log_ratio.exp();
  auto unclipped = -advantages * ratio;
  auto clipped = -advantages * ratio.clamp(1.0 - clip, 1.0 + clip);
  PolicyLoss out;
  out.loss = torch::max(unclipped, clipped).mean();
  {
    torch::NoGradGuard g;
    out.approx_kl = ((ratio - 1) - log_ratio).mean().item<double>();
    out.clipfrac = ((ratio - 1.0).abs() > clip).to(torch::kFloat32).mean().item<double>();
  }
  return out;
}

torch::Tensor ValueLoss(const torch::Tensor& new_values, const torch::Tensor& old_values,
                        const torch::Tensor& returns, double clip) {
  auto unclipped = (new_values - returns).pow(2);
  if (clip <= 0) return 0.5 * unclipped.mean();
  auto v_clipped = old_values + (new_values - old_values).clamp(-clip, clip);
  auto clipped = (v_clipped - returns).pow(2);
  return 0.5 * torch::max(unclipped, clipped).mean();
}

torch::Tensor NormalizeAdvantages(const torch::Tensor& a) {
  if (a.numel() < 2) return a;
  return (a - a.mean()) / (a.std() + 1e-8);
}

double ExplainedVariance(const torch::Tensor& values, const torch::Tensor& returns) {
  double var_r = returns.var().item<double>();
  if (var_r == 0) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 - (returns - values).var().item<double>() / var_r;
}

}  // namespace rlforge
