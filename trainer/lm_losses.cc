#include "trainer/lm_losses.h"

#include "common/status.h"
#include "trainer/lm_metrics.h"

namespace rlforge {

absl::StatusOr<torch::Tensor> TokenAdvantages(const torch::Tensor& adv, int64_t B, int64_t T) {
  if (adv.defined() && adv.dim() == 1 && adv.size(0) == B) return adv.unsqueeze(1);
  if (adv.defined() && adv.dim() == 2 && adv.size(0) == B && adv.size(1) == T) return adv;
  return absl::InvalidArgumentError(absl::StrCat("advantages: expected [", B, "] or [", B, ", ", T,
                                                 "], got ", DescribeShape(adv)));
}

absl::StatusOr<torch::Tensor> AggregateLoss(const torch::Tensor& per_token,
                                            const torch::Tensor& mask, LossAggregation agg,
                                            double norm_length) {
  RETURN_IF_ERROR(CheckTokenTensor(per_token, "per_token"));
  RETURN_IF_ERROR(CheckShape(mask, "mask", per_token.sizes()));
  if (norm_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("norm_length: expected >= 0, got ", norm_length));
  }
  const int64_t B = per_token.size(0), T = per_token.size(1);
  auto m = mask.to(per_token.scalar_type());
  auto masked = per_token.masked_fill(m == 0, 0) * m;
  switch (agg) {
    case LossAggregation::kTokenMean:
      return masked.sum() / m.sum().clamp_min(1.0);
    case LossAggregation::kSeqMeanTokenSum:
      return masked.sum(1).sum() / static_cast<double>(std::max<int64_t>(B, 1));
    case LossAggregation::kSeqMeanTokenMean:
      return (masked.sum(1) / m.sum(1).clamp_min(1.0)).sum() /
             static_cast<double>(std::max<int64_t>(B, 1));
    case LossAggregation::kSeqMeanTokenSumNorm: {
      double len = norm_length > 0 ? norm_length : static_cast<double>(std::max<int64_t>(T, 1));
      return masked.sum() / (static_cast<double>(std::max<int64_t>(B, 1)) * len);
    }
  }
  return absl::InternalError("AggregateLoss: unknown aggregation");
}

absl::StatusOr<torch::Tensor> KlPenalty(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                                        KlEstimator estimator) {
  RETURN_IF_ERROR(CheckTokenTensor(logp, "logp"));
  RETURN_IF_ERROR(CheckShape(ref_logp, "ref_logp", logp.sizes()));
  auto d = ref_logp - logp;
  switch (estimator) {
    case KlEstimator::kK1:
      return -d;
    case KlEstimator::kK2:
      return 0.5 * d * d;
    case KlEstimator::kK3:
      return d.exp() - d - 1;
  }
  return absl::InternalError("KlPenalty: unknown estimator");
}

absl::StatusOr<torch::Tensor> KlPenalizedRewards(const torch::Tensor& rewards,
                                                 const torch::Tensor& kl, const torch::Tensor& mask,
                                                 double beta) {
  RETURN_IF_ERROR(CheckTokenTensor(kl, "kl"));
  RETURN_IF_ERROR(CheckShape(mask, "mask", kl.sizes()));
  RETURN_IF_ERROR(CheckShape(rewards, "rewards", {kl.size(0)}));
  auto m = mask.to(kl.scalar_type());
  return rewards - beta * (kl.masked_fill(m == 0, 0) * m).sum(1);
}

absl::StatusOr<GroupAdvantages> ComputeGroupAdvantages(const torch::Tensor& rewards,
                                                       const GroupAdvantageOptions& options) {
  const int64_t G = options.group_size;
  if (G <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group_size: expected a positive integer, got ", G));
  }
  if (!rewards.defined() || rewards.dim() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rewards: expected a [B] tensor, got ", DescribeShape(rewards)));
  }
  const int64_t B = rewards.size(0);
  if (B % G != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rewards: batch size ", B, " is not a multiple of group_size ", G));
  }
  if (options.std_eps < 0 || options.equal_tolerance < 0) {
    return absl::InvalidArgumentError("std_eps and equal_tolerance must be >= 0");
  }
  torch::NoGradGuard no_grad;
  auto r = rewards.is_floating_point() ? rewards : rewards.to(torch::kFloat32);
  auto grouped = r.reshape({B / G, G});
  GroupAdvantages out;
  out.num_groups = B / G;
  out.group_mean = grouped.mean(1);
  // One sample per group has no spread: std 0 (torch would give NaN with Bessel's correction).
  out.group_std = G > 1 ? grouped.std(1, options.unbiased_std) : torch::zeros_like(out.group_mean);
  auto spread = std::get<0>(grouped.max(1)) - std::get<0>(grouped.min(1));
  out.degenerate = spread <= options.equal_tolerance;
  auto centred = grouped - out.group_mean.unsqueeze(1);
  if (options.scale_by_std) centred = centred / (out.group_std.unsqueeze(1) + options.std_eps);
  centred = centred.masked_fill(out.degenerate.unsqueeze(1), 0);
  out.advantages = centred.reshape({B});
  out.num_degenerate = out.degenerate.sum().item<int64_t>();
  auto keep = (~out.degenerate).unsqueeze(1).expand({B / G, G}).reshape({B});
  out.kept_indices = keep.nonzero().reshape({-1});
  return out;
}

namespace {

// The correction's per-token weight (undefined when it leaves pg as it is) and its metrics.
// A dropped token gets weight 0 but stays in the aggregation's token count (as AReaL's
// decoupled loss divides by the original mask), so a batch sharded over ranks normalises as a
// whole one does.
struct OffPolicyWeights {
  torch::Tensor weight;
  double mean = 1, max = 1, corrected = 0;
};

absl::StatusOr<OffPolicyWeights> CorrectionWeights(const LmPolicyLossInput& in,
                                                   const LmPolicyLossOptions& options) {
  OffPolicyWeights out;
  if (options.correction == OffPolicyCorrection::kNone) return out;
  if (!(options.is_cap > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("is_cap: expected a cap > 1, got ", options.is_cap));
  }
  RETURN_IF_ERROR(CheckShape(in.behaviour_logp, "behaviour_logp", in.logp.sizes()));
  torch::NoGradGuard no_grad;
  const double cap = options.is_cap;
  auto m = in.mask.to(in.logp.scalar_type());
  auto w = (in.old_logp - in.behaviour_logp).exp().to(in.logp.scalar_type());
  auto on = m > 0;
  const double tokens = std::max(1.0, m.sum().item<double>());
  out.mean = (w * m).sum().item<double>() / tokens;
  out.max = on.any().item<bool>() ? w.masked_select(on).max().item<double>() : 1.0;
  torch::Tensor off;  // the tokens the correction acts on
  switch (options.correction) {
    case OffPolicyCorrection::kDecoupled:
      off = w > cap;
      out.weight = w.masked_fill(off, 0);
      break;
    case OffPolicyCorrection::kTruncatedIs:
      off = w > cap;
      out.weight = w.clamp_max(cap);
      break;
    case OffPolicyCorrection::kMask:
      off = (w > cap) | (w < 1.0 / cap);
      out.weight = torch::ones_like(w).masked_fill(off, 0);
      break;
    case OffPolicyCorrection::kNone:
      break;
  }
  out.corrected = (off & on).sum().item<double>() / tokens;
  return out;
}

}  // namespace

absl::StatusOr<LmPolicyLoss> ComputeLmPolicyLoss(const LmPolicyLossInput& in,
                                                 const LmPolicyLossOptions& options) {
  const ClipOptions& clip = options.clip;
  RETURN_IF_ERROR(CheckTokenTensor(in.logp, "logp"));
  const int64_t B = in.logp.size(0), T = in.logp.size(1);
  RETURN_IF_ERROR(CheckShape(in.old_logp, "old_logp", in.logp.sizes()));
  RETURN_IF_ERROR(CheckShape(in.mask, "mask", in.logp.sizes()));
  ASSIGN_OR_RETURN(auto adv, TokenAdvantages(in.advantages, B, T));
  if (clip.clip_low < 0 || clip.clip_low >= 1 || clip.clip_high < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("clip: expected 0 <= clip_low < 1 and clip_high >= 0, got clip_low ",
                     clip.clip_low, ", clip_high ", clip.clip_high));
  }
  if (clip.dual_clip != 0 && clip.dual_clip <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dual_clip: expected 0 (off) or > 1, got ", clip.dual_clip));
  }
  if (options.kl_beta < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kl_beta: expected >= 0, got ", options.kl_beta));
  }
  if (options.kl_beta > 0 && !in.ref_logp.defined()) {
    return absl::InvalidArgumentError("ref_logp: required when kl_beta > 0");
  }

  auto log_ratio = in.logp - in.old_logp.detach();
  auto ratio = log_ratio.exp();
  adv = adv.detach();
  auto pg = torch::max(-adv * ratio, -adv * ratio.clamp(1.0 - clip.clip_low, 1.0 + clip.clip_high));
  if (clip.dual_clip > 1) pg = torch::where(adv < 0, torch::min(pg, -adv * clip.dual_clip), pg);

  LmPolicyLoss out;
  ASSIGN_OR_RETURN(const OffPolicyWeights w, CorrectionWeights(in, options));
  if (w.weight.defined()) pg = pg * w.weight;
  out.is_weight_mean = w.mean;
  out.is_weight_max = w.max;
  out.is_corrected_fraction = w.corrected;
  auto per_token = pg;
  torch::Tensor kl;
  if (in.ref_logp.defined()) {
    ASSIGN_OR_RETURN(kl, KlPenalty(in.logp, in.ref_logp.detach(), options.kl_estimator));
    if (options.kl_beta > 0) per_token = pg + options.kl_beta * kl;
  }
  ASSIGN_OR_RETURN(out.loss,
                   AggregateLoss(per_token, in.mask, options.aggregation, options.norm_length));

  torch::NoGradGuard no_grad;
  ASSIGN_OR_RETURN(auto pg_loss,
                   AggregateLoss(pg, in.mask, options.aggregation, options.norm_length));
  out.pg_loss = pg_loss.item<double>();
  if (kl.defined()) out.kl = MaskedMean(kl, in.mask).item<double>();
  ASSIGN_OR_RETURN(auto fractions,
                   ComputeClipFractions(in.logp, in.old_logp, adv, in.mask, clip.clip_low,
                                        clip.clip_high, clip.dual_clip));
  out.clipfrac_low = fractions.low;
  out.clipfrac_high = fractions.high;
  out.clipfrac_dual = fractions.dual;
  ASSIGN_OR_RETURN(out.approx_kl, ApproxKl(in.logp, in.old_logp, in.mask));
  out.ratio_mean = MaskedMean(ratio, in.mask).item<double>();
  return out;
}

}  // namespace rlforge
