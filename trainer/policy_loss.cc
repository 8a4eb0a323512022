#include "trainer/policy_loss.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "trainer/lm_metrics.h"

namespace rlforge {

namespace {

// The checks of the losses below; `clip_low_one`: clip_low 1 (no lower bound) is accepted.
absl::Status CheckInput(const LmPolicyLossInput& in, const LmPolicyLossOptions& options,
                        const char* loss, bool clip_low_one) {
  RETURN_IF_ERROR(CheckTokenTensor(in.logp, "logp"));
  RETURN_IF_ERROR(CheckShape(in.old_logp, "old_logp", in.logp.sizes()));
  RETURN_IF_ERROR(CheckShape(in.mask, "mask", in.logp.sizes()));
  const ClipOptions& clip = options.clip;
  const bool low_ok = clip.clip_low >= 0 && (clip_low_one ? clip.clip_low <= 1 : clip.clip_low < 1);
  if (!low_ok || clip.clip_high < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "clip: ", loss, " expects 0 <= clip_low ", clip_low_one ? "<=" : "<",
        " 1 and clip_high >= 0, got clip_low ", clip.clip_low, ", clip_high ", clip.clip_high));
  }
  if (clip.dual_clip != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dual_clip: ", loss, " has no dual clip (ppo_clip's), got ", clip.dual_clip));
  }
  if (options.correction != OffPolicyCorrection::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat("correction: ", loss, " has no off-policy correction (ppo_clip's)"));
  }
  if (options.kl_beta < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kl_beta: expected >= 0, got ", options.kl_beta));
  }
  if (options.kl_beta > 0 && !in.ref_logp.defined()) {
    return absl::InvalidArgumentError("ref_logp: required when kl_beta > 0");
  }
  return absl::OkStatus();
}

// The policy term pg [B, T] with the KL term, aggregated, as ComputeLmPolicyLoss does it:
// out.loss = agg(pg + kl_beta * kl), and the metrics that do not depend on the loss's ratio.
absl::Status Aggregate(const torch::Tensor& pg, const LmPolicyLossInput& in,
                       const LmPolicyLossOptions& options, LmPolicyLoss& out) {
  torch::Tensor per_token = pg, kl;
  if (in.ref_logp.defined()) {
    ASSIGN_OR_RETURN(kl, KlPenalty(in.logp, in.ref_logp.detach(), options.kl_estimator));
    if (options.kl_beta > 0) per_token = pg + options.kl_beta * kl;
  }
  ASSIGN_OR_RETURN(out.loss,
                   AggregateLoss(per_token, in.mask, options.aggregation, options.norm_length));
  torch::NoGradGuard no_grad;
  ASSIGN_OR_RETURN(const torch::Tensor pg_loss,
                   AggregateLoss(pg, in.mask, options.aggregation, options.norm_length));
  out.pg_loss = pg_loss.item<double>();
  if (kl.defined()) out.kl = MaskedMean(kl, in.mask).item<double>();
  ASSIGN_OR_RETURN(out.approx_kl, ApproxKl(in.logp, in.old_logp, in.mask));
  return absl::OkStatus();
}

class PpoClipLoss final : public PolicyLoss {
 public:
  using PolicyLoss::PolicyLoss;
  absl::StatusOr<LmPolicyLoss> Compute(const LmPolicyLossInput& in) const override {
    return ComputeLmPolicyLoss(in, options_);
  }
};

class GspoLoss final : public PolicyLoss {
 public:
  using PolicyLoss::PolicyLoss;
  absl::StatusOr<LmPolicyLoss> Compute(const LmPolicyLossInput& in) const override {
    return ComputeGspoLoss(in, options_);
  }
};

class CispoLoss final : public PolicyLoss {
 public:
  using PolicyLoss::PolicyLoss;
  absl::StatusOr<LmPolicyLoss> Compute(const LmPolicyLossInput& in) const override {
    return ComputeCispoLoss(in, options_);
  }
};

}  // namespace

absl::StatusOr<LmPolicyLoss> ComputeGspoLoss(const LmPolicyLossInput& in,
                                             const LmPolicyLossOptions& options) {
  RETURN_IF_ERROR(CheckInput(in, options, "gspo", /*clip_low_one=*/false));
  const int64_t B = in.logp.size(0), T = in.logp.size(1);
  ASSIGN_OR_RETURN(torch::Tensor adv, TokenAdvantages(in.advantages, B, T));
  adv = adv.detach();
  const ClipOptions& clip = options.clip;
  const torch::Tensor m = in.mask.to(in.logp.scalar_type());
  const torch::Tensor pad = m == 0;  // padding may hold any logprob, -inf included
  // log s_i: the mean over the sequence's tokens of log r, without gradient.
  const torch::Tensor seq_log_ratio =
      ((in.logp.detach() - in.old_logp.detach()).masked_fill(pad, 0) * m).sum(1, true) /
      m.sum(1, true).clamp_min(1.0);  // [B, 1]
  // s_i,t = sg(s_i) * pi / sg(pi): value s_i, gradient s_i * d logp_t.
  const torch::Tensor ratio =
      (seq_log_ratio + (in.logp - in.logp.detach()).masked_fill(pad, 0)).exp();
  const torch::Tensor pg =
      torch::max(-adv * ratio, -adv * ratio.clamp(1.0 - clip.clip_low, 1.0 + clip.clip_high));
  LmPolicyLoss out;
  RETURN_IF_ERROR(Aggregate(pg, in, options, out));
  torch::NoGradGuard no_grad;
  const torch::Tensor seq = seq_log_ratio.expand({B, T});
  ASSIGN_OR_RETURN(const ClipFractions f,
                   ComputeClipFractions(seq, torch::zeros_like(seq), adv, in.mask, clip.clip_low,
                                        clip.clip_high, /*dual_clip=*/0));
  out.clipfrac_low = f.low;
  out.clipfrac_high = f.high;
  out.ratio_mean = MaskedMean(seq.exp(), in.mask).item<double>();
  return out;
}

absl::StatusOr<LmPolicyLoss> ComputeCispoLoss(const LmPolicyLossInput& in,
                                              const LmPolicyLossOptions& options) {
  RETURN_IF_ERROR(CheckInput(in, options, "cispo", /*clip_low_one=*/true));
  const int64_t B = in.logp.size(0), T = in.logp.size(1);
  ASSIGN_OR_RETURN(torch::Tensor adv, TokenAdvantages(in.advantages, B, T));
  adv = adv.detach();
  const ClipOptions& clip = options.clip;
  const double lower = std::max(0.0, 1.0 - clip.clip_low), upper = 1.0 + clip.clip_high;
  const torch::Tensor pad = in.mask == 0;
  const torch::Tensor ratio = (in.logp.detach() - in.old_logp.detach()).exp();
  const torch::Tensor weight = ratio.clamp(lower, upper).masked_fill(pad, 0);
  const torch::Tensor pg = -weight * adv * in.logp.masked_fill(pad, 0);
  LmPolicyLoss out;
  RETURN_IF_ERROR(Aggregate(pg, in, options, out));
  torch::NoGradGuard no_grad;
  const torch::Tensor m = in.mask.to(ratio.scalar_type());
  out.clipfrac_low = MaskedMean((ratio < lower).to(m.scalar_type()), m).item<double>();
  out.clipfrac_high = MaskedMean((ratio > upper).to(m.scalar_type()), m).item<double>();
  out.ratio_mean = MaskedMean(ratio, in.mask).item<double>();
  return out;
}

std::unique_ptr<PolicyLoss> CreatePolicyLoss(PolicyLossKind kind,
                                             const LmPolicyLossOptions& options) {
  switch (kind) {
    case PolicyLossKind::kPpoClip:
      return std::make_unique<PpoClipLoss>(options);
    case PolicyLossKind::kGspo:
      return std::make_unique<GspoLoss>(options);
    case PolicyLossKind::kCispo:
      return std::make_unique<CispoLoss>(options);
  }
  std::abort();  // unreachable: the switch covers every enumerator (-Werror=switch)
}

absl::StatusOr<std::unique_ptr<PolicyLoss>> CreatePolicyLoss(const JobConfig& config,
                                                             bool kl_in_loss) {
  const AlgorithmSpec& algorithm = *config.job.algorithm;
  const std::optional<PolicyLossKind> kind =
      config.grpo.policy_loss.has_value() ? config.grpo.policy_loss : algorithm.default_policy_loss;
  if (!kind.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job.algorithm ", algorithm.name, " has no policy loss"));
  }
  const GrpoOptions& g = config.grpo;
  LmPolicyLossOptions lo;
  ASSIGN_OR_RETURN(lo.aggregation, LossAggregationOf(g));
  lo.kl_estimator = g.kl_estimator;
  lo.clip.clip_low = g.clip_low;
  lo.clip.clip_high = g.clip_high;
  lo.clip.dual_clip = g.dual_clip;
  lo.norm_length = static_cast<double>(g.max_new_tokens);
  lo.kl_beta = kl_in_loss ? g.kl_beta : 0;
  lo.correction = g.off_policy;
  lo.is_cap = g.is_cap;
  return CreatePolicyLoss(*kind, lo);
}

}  // namespace rlforge
