#include "trainer/token_ppo.h"

#include "common/status.h"
#include "trainer/lm_metrics.h"

namespace rlforge {

absl::StatusOr<torch::Tensor> TokenLevelRewards(const torch::Tensor& rewards,
                                                const torch::Tensor& mask, const torch::Tensor& kl,
                                                double kl_beta) {
  RETURN_IF_ERROR(CheckTokenTensor(mask, "mask"));
  const int64_t B = mask.size(0), T = mask.size(1);
  RETURN_IF_ERROR(CheckShape(rewards, "rewards", {B}));
  if (kl.defined()) RETURN_IF_ERROR(CheckShape(kl, "kl", mask.sizes()));
  torch::NoGradGuard no_grad;
  auto dtype = rewards.is_floating_point() ? rewards.scalar_type() : torch::kFloat32;
  auto m = mask.to(dtype);
  auto on = m > 0;
  torch::Tensor out = torch::zeros({B, T}, m.options());
  if (kl.defined() && kl_beta != 0) out = -kl_beta * kl.to(dtype).masked_fill(~on, 0) * m;
  // Last response position per row: the largest t with mask > 0.
  auto positions = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(m.device()));
  auto last = torch::where(on, positions.unsqueeze(0), torch::full_like(positions, -1)).amax(1);
  auto empty = (last < 0).nonzero();
  if (empty.numel() > 0) {
    return absl::InvalidArgumentError(absl::StrCat("mask: row ", empty[0][0].item<int64_t>(),
                                                   " has no response token to carry its reward"));
  }
  out.scatter_add_(1, last.unsqueeze(1), rewards.to(dtype).unsqueeze(1));
  return out;
}

absl::StatusOr<torch::Tensor> MaskedWhiten(const torch::Tensor& x, const torch::Tensor& mask,
                                           double eps) {
  RETURN_IF_ERROR(CheckTokenTensor(x, "x"));
  RETURN_IF_ERROR(CheckShape(mask, "mask", x.sizes()));
  auto on = mask > 0;
  auto n = on.sum().item<double>();
  if (n < 2) return x.masked_fill(~on, 0);
  auto xm = x.masked_fill(~on, 0);
  auto mean = xm.sum() / n;
  auto var = (xm - mean).masked_fill(~on, 0).pow(2).sum() / (n - 1);
  return ((x - mean) / (var.sqrt() + eps)).masked_fill(~on, 0);
}

absl::StatusOr<TokenGaeResult> TokenGae(const torch::Tensor& token_rewards,
                                        const torch::Tensor& values, const torch::Tensor& mask,
                                        const TokenGaeOptions& options) {
  RETURN_IF_ERROR(CheckTokenTensor(token_rewards, "token_rewards"));
  RETURN_IF_ERROR(CheckShape(values, "values", token_rewards.sizes()));
  RETURN_IF_ERROR(CheckShape(mask, "mask", token_rewards.sizes()));
  if (options.gamma < 0 || options.gamma > 1 || options.lambda < 0 || options.lambda > 1) {
    return absl::InvalidArgumentError(absl::StrCat("gamma and lambda: expected in [0, 1], got ",
                                                   options.gamma, " and ", options.lambda));
  }
  torch::NoGradGuard no_grad;
  const int64_t B = values.size(0), T = values.size(1);
  // A sequential recursion over T with B-wide rows: a plain loop on the CPU in double beats
  // 3T small tensor launches and is exact.
  auto cpu = torch::TensorOptions().dtype(torch::kFloat64);
  auto r = token_rewards.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto v = values.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto m = (mask.detach() > 0).to(torch::kCPU).contiguous();
  auto adv = torch::zeros({B, T}, cpu), ret = torch::zeros({B, T}, cpu);
  auto ra = r.accessor<double, 2>(), va = v.accessor<double, 2>();
  auto ma = m.accessor<bool, 2>();
  auto aa = adv.accessor<double, 2>(), rta = ret.accessor<double, 2>();
  const double gl = options.gamma * options.lambda;
  for (int64_t b = 0; b < B; ++b) {
    double next_value = 0, next_adv = 0;
    for (int64_t t = T - 1; t >= 0; --t) {
      if (!ma[b][t]) continue;
      double a = ra[b][t] + options.gamma * next_value - va[b][t] + gl * next_adv;
      aa[b][t] = a;
      rta[b][t] = a + va[b][t];
      next_value = va[b][t];
      next_adv = a;
    }
  }
  auto out_opts = values.options();
  TokenGaeResult out;
  out.returns = ret.to(out_opts);
  if (options.whiten) {
    ASSIGN_OR_RETURN(auto w, MaskedWhiten(adv, m));
    out.advantages = w.to(out_opts);
  } else {
    out.advantages = adv.to(out_opts);
  }
  return out;
}

absl::StatusOr<TokenValueLoss> ComputeTokenValueLoss(const torch::Tensor& values,
                                                     const torch::Tensor& old_values,
                                                     const torch::Tensor& returns,
                                                     const torch::Tensor& mask, double clip,
                                                     LossAggregation agg) {
  RETURN_IF_ERROR(CheckTokenTensor(values, "values"));
  RETURN_IF_ERROR(CheckShape(old_values, "old_values", values.sizes()));
  RETURN_IF_ERROR(CheckShape(returns, "returns", values.sizes()));
  RETURN_IF_ERROR(CheckShape(mask, "mask", values.sizes()));
  auto target = returns.detach();
  auto unclipped = (values - target).pow(2);
  TokenValueLoss out;
  torch::Tensor per_token = unclipped;
  if (clip > 0) {
    auto old = old_values.detach();
    auto clipped = (old + (values - old).clamp(-clip, clip) - target).pow(2);
    per_token = torch::max(unclipped, clipped);
    torch::NoGradGuard no_grad;
    out.clipfrac =
        MaskedMean((clipped > unclipped).to(values.scalar_type()), mask.to(values.scalar_type()))
            .item<double>();
  }
  ASSIGN_OR_RETURN(auto l, AggregateLoss(per_token, mask, agg));
  out.loss = 0.5 * l;
  return out;
}

}  // namespace rlforge
