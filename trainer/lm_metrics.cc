#include "trainer/lm_metrics.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "common/status.h"

namespace rlforge {
namespace {

std::string ShapeString(at::IntArrayRef shape) {
  std::ostringstream s;
  s << shape;
  return s.str();
}

// Checks the [B, T] triple every token metric takes.
absl::Status CheckTokenArgs(const torch::Tensor& logp, const torch::Tensor& old_logp,
                            const torch::Tensor& mask, std::string_view logp_name,
                            std::string_view old_name) {
  RETURN_IF_ERROR(CheckTokenTensor(logp, logp_name));
  RETURN_IF_ERROR(CheckShape(old_logp, old_name, logp.sizes()));
  return CheckShape(mask, "mask", logp.sizes());
}

}  // namespace

std::string DescribeShape(const torch::Tensor& t) {
  return t.defined() ? ShapeString(t.sizes()) : "an undefined tensor";
}

absl::Status CheckTokenTensor(const torch::Tensor& t, std::string_view name) {
  if (t.defined() && t.dim() == 2) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(name), ": expected a [B, T] tensor, got ", DescribeShape(t)));
}

absl::Status CheckShape(const torch::Tensor& t, std::string_view name, at::IntArrayRef shape) {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(name), ": expected shape ", ShapeString(shape), ", got an undefined tensor"));
  }
  if (t.sizes() != shape) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(name), ": expected shape ",
                                                   ShapeString(shape), ", got ",
                                                   ShapeString(t.sizes())));
  }
  return absl::OkStatus();
}

torch::Tensor MaskedMean(const torch::Tensor& x, const torch::Tensor& mask) {
  // masked_fill first: padding may hold inf/NaN (e.g. -inf logprobs), and inf * 0 is NaN.
  return (x.masked_fill(mask == 0, 0) * mask).sum() / mask.sum().clamp_min(1.0);
}

absl::StatusOr<torch::Tensor> TokenLogprobs(const torch::Tensor& logits,
                                            const torch::Tensor& targets, int64_t chunk_rows) {
  if (!logits.defined() || logits.dim() != 3) {
    return absl::InvalidArgumentError("TokenLogprobs: logits: expected a [B, T, V] tensor");
  }
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  RETURN_IF_ERROR(CheckShape(targets, "TokenLogprobs: targets", {B, T}));
  if (targets.scalar_type() != torch::kLong) {
    return absl::InvalidArgumentError("TokenLogprobs: targets: expected int64 token ids");
  }
  if (chunk_rows <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenLogprobs: chunk_rows: expected > 0, got ", chunk_rows));
  }
  if (targets.numel() > 0) {
    int64_t lo = targets.min().item<int64_t>(), hi = targets.max().item<int64_t>();
    if (lo < 0 || hi >= V) {
      return absl::InvalidArgumentError(absl::StrCat("TokenLogprobs: targets: ids must be in [0, ",
                                                     V, "), got range [", lo, ", ", hi, "]"));
    }
  }
  const bool upcast =
      logits.scalar_type() == torch::kHalf || logits.scalar_type() == torch::kBFloat16;
  auto rows = logits.reshape({B * T, V});
  auto ids = targets.reshape({B * T, 1});
  std::vector<torch::Tensor> parts;
  for (int64_t start = 0; start < B * T; start += chunk_rows) {
    int64_t len = std::min(chunk_rows, B * T - start);
    auto z = rows.narrow(0, start, len);
    if (upcast) z = z.to(torch::kFloat32);
    auto picked = z.gather(1, ids.narrow(0, start, len)).squeeze(1);
    parts.push_back(picked - torch::logsumexp(z, {1}));
  }
  if (parts.empty()) {
    return torch::zeros({B, T},
                        logits.options().dtype(upcast ? torch::kFloat32 : logits.scalar_type()));
  }
  return torch::cat(parts).reshape({B, T});
}

absl::StatusOr<torch::Tensor> TokenEntropy(const torch::Tensor& logits, int64_t chunk_rows) {
  if (!logits.defined() || logits.dim() != 3) {
    return absl::InvalidArgumentError("TokenEntropy: logits: expected a [B, T, V] tensor");
  }
  if (chunk_rows <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TokenEntropy: chunk_rows: expected > 0, got ", chunk_rows));
  }
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  const bool upcast =
      logits.scalar_type() == torch::kHalf || logits.scalar_type() == torch::kBFloat16;
  auto rows = logits.reshape({B * T, V});
  std::vector<torch::Tensor> parts;
  for (int64_t start = 0; start < B * T; start += chunk_rows) {
    auto z = rows.narrow(0, start, std::min(chunk_rows, B * T - start));
    if (upcast) z = z.to(torch::kFloat32);
    auto p = torch::softmax(z, 1);
    parts.push_back(torch::logsumexp(z, {1}) - (p * z).sum(1));
  }
  if (parts.empty()) {
    return torch::zeros({B, T},
                        logits.options().dtype(upcast ? torch::kFloat32 : logits.scalar_type()));
  }
  return torch::cat(parts).reshape({B, T});
}

absl::StatusOr<ClipFractions> ComputeClipFractions(const torch::Tensor& logp,
                                                   const torch::Tensor& old_logp,
                                                   const torch::Tensor& advantages,
                                                   const torch::Tensor& mask, double clip_low,
                                                   double clip_high, double dual_clip) {
  RETURN_IF_ERROR(CheckTokenArgs(logp, old_logp, mask, "logp", "old_logp"));
  torch::NoGradGuard no_grad;
  auto adv = advantages;
  if (adv.defined() && adv.dim() == 1) adv = adv.unsqueeze(1);
  if (!adv.defined() || adv.dim() != 2 || adv.size(0) != logp.size(0) ||
      (adv.size(1) != 1 && adv.size(1) != logp.size(1))) {
    return absl::InvalidArgumentError(
        absl::StrCat("advantages: expected [B] or [B, T] with B, T = ", ShapeString(logp.sizes()),
                     ", got ", DescribeShape(advantages)));
  }
  auto ratio = (logp - old_logp).exp();
  auto m = mask.to(ratio.scalar_type());
  auto frac = [&](const torch::Tensor& region) {
    return MaskedMean(region.to(ratio.scalar_type()), m).item<double>();
  };
  ClipFractions out;
  out.low = frac((ratio < 1.0 - clip_low) & (adv < 0));
  out.high = frac((ratio > 1.0 + clip_high) & (adv > 0));
  if (dual_clip > 1.0) out.dual = frac((ratio > dual_clip) & (adv < 0));
  return out;
}

absl::StatusOr<double> ApproxKl(const torch::Tensor& logp, const torch::Tensor& old_logp,
                                const torch::Tensor& mask) {
  RETURN_IF_ERROR(CheckTokenArgs(logp, old_logp, mask, "logp", "old_logp"));
  torch::NoGradGuard no_grad;
  auto log_ratio = logp - old_logp;
  return MaskedMean(log_ratio.exp() - 1 - log_ratio, mask).item<double>();
}

absl::StatusOr<LogprobMismatch> ComputeLogprobMismatch(const torch::Tensor& rollout_logp,
                                                       const torch::Tensor& trainer_logp,
                                                       const torch::Tensor& mask) {
  RETURN_IF_ERROR(CheckTokenArgs(trainer_logp, rollout_logp, mask, "trainer_logp", "rollout_logp"));
  torch::NoGradGuard no_grad;
  auto diff = (trainer_logp - rollout_logp).abs();
  LogprobMismatch out;
  out.mean_abs = MaskedMean(diff, mask).item<double>();
  if (diff.numel() > 0) out.max_abs = diff.masked_fill(mask == 0, 0).max().item<double>();
  ASSIGN_OR_RETURN(out.k3, ApproxKl(trainer_logp, rollout_logp, mask));
  return out;
}

}  // namespace rlforge
