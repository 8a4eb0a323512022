#include "trainer/dpo_loss.h"

#include "common/status.h"
#include "trainer/lm_metrics.h"

namespace rlforge {

absl::StatusOr<torch::Tensor> SequenceLogprobs(const torch::Tensor& token_logp,
                                               const torch::Tensor& mask, bool average) {
  if (!token_logp.defined() || token_logp.dim() != 2) {
    return absl::InvalidArgumentError("SequenceLogprobs: token_logp: expected a [B, T] tensor");
  }
  RETURN_IF_ERROR(CheckShape(mask, "SequenceLogprobs: mask", token_logp.sizes()));
  auto m = mask.to(token_logp.scalar_type());
  auto sum = (token_logp.masked_fill(m == 0, 0) * m).sum(1);
  if (!average) return sum;
  return sum / m.sum(1).clamp_min(1.0);
}

absl::StatusOr<DpoLoss> ComputeDpoLoss(const DpoInput& in, const DpoOptions& options) {
  if (!in.chosen_logp.defined() || in.chosen_logp.dim() != 1) {
    return absl::InvalidArgumentError("chosen_logp: expected a [B] tensor");
  }
  const int64_t B = in.chosen_logp.size(0);
  RETURN_IF_ERROR(CheckShape(in.rejected_logp, "rejected_logp", {B}));
  RETURN_IF_ERROR(CheckShape(in.ref_chosen_logp, "ref_chosen_logp", {B}));
  RETURN_IF_ERROR(CheckShape(in.ref_rejected_logp, "ref_rejected_logp", {B}));
  if (!(options.beta > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("beta: expected > 0, got ", options.beta));
  }
  if (options.label_smoothing < 0 || options.label_smoothing >= 0.5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label_smoothing: expected a value in [0, 0.5), got ", options.label_smoothing));
  }
  if (options.type == DpoLossType::kIpo && options.label_smoothing != 0) {
    return absl::InvalidArgumentError("label_smoothing: only the sigmoid loss uses it");
  }
  auto chosen_ratio = in.chosen_logp - in.ref_chosen_logp.detach();
  auto rejected_ratio = in.rejected_logp - in.ref_rejected_logp.detach();
  auto h = chosen_ratio - rejected_ratio;
  const double beta = options.beta, ls = options.label_smoothing;
  DpoLoss out;
  switch (options.type) {
    case DpoLossType::kSigmoid:
      out.losses = -(1 - ls) * torch::log_sigmoid(beta * h) - ls * torch::log_sigmoid(-beta * h);
      break;
    case DpoLossType::kIpo:
      out.losses = (h - 1.0 / (2 * beta)).pow(2);
      break;
  }
  out.loss = B > 0 ? out.losses.mean() : out.losses.sum();
  torch::NoGradGuard no_grad;
  out.chosen_rewards = beta * chosen_ratio.detach();
  out.rejected_rewards = beta * rejected_ratio.detach();
  if (B > 0) {
    out.chosen_reward = out.chosen_rewards.mean().item<double>();
    out.rejected_reward = out.rejected_rewards.mean().item<double>();
    out.margin = (out.chosen_rewards - out.rejected_rewards).mean().item<double>();
    out.accuracy =
        (out.chosen_rewards > out.rejected_rewards).to(torch::kFloat64).mean().item<double>();
  }
  return out;
}

}  // namespace rlforge
