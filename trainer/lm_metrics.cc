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

// Half-precision logits are reduced in float32; float32 and float64 in their own type.
c10::ScalarType ReductionType(c10::ScalarType t) {
  return t == torch::kHalf || t == torch::kBFloat16 ? torch::kFloat32 : t;
}

// Checks the [B, T] triple every token metric takes.
absl::Status CheckTokenArgs(const torch::Tensor& logp, const torch::Tensor& old_logp,
                            const torch::Tensor& mask, std::string_view logp_name,
                            std::string_view old_name) {
  RETURN_IF_ERROR(CheckTokenTensor(logp, logp_name));
  RETURN_IF_ERROR(CheckShape(old_logp, old_name, logp.sizes()));
  return CheckShape(mask, "mask", logp.sizes());
}

// logits[target] - logsumexp(logits) over [N, V] rows, chunk by chunk, with a hand-written
// backward (d/dz = onehot(target) - softmax(z), per chunk, written into one gradient tensor).
// Autograd through narrow + logsumexp would instead keep each chunk's float32 copy of
// half-precision logits and build a full-size zero gradient per chunk.
class ChunkedTokenLogprobs : public torch::autograd::Function<ChunkedTokenLogprobs> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor rows,
                               torch::Tensor ids, int64_t chunk_rows) {
    const int64_t N = rows.size(0);
    const auto acc = ReductionType(rows.scalar_type());
    auto out = torch::empty({N}, rows.options().dtype(acc));
    auto lse = torch::empty({N}, rows.options().dtype(acc));
    {
      torch::NoGradGuard no_grad;
      for (int64_t start = 0; start < N; start += chunk_rows) {
        int64_t len = std::min(chunk_rows, N - start);
        auto z = rows.narrow(0, start, len).to(acc);
        auto l = torch::logsumexp(z, {1});
        lse.narrow(0, start, len).copy_(l);
        out.narrow(0, start, len)
            .copy_(z.gather(1, ids.narrow(0, start, len).unsqueeze(1)).squeeze(1) - l);
      }
    }
    ctx->save_for_backward({rows, ids, lse});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto& rows = saved[0];
    const auto& ids = saved[1];
    const auto& lse = saved[2];
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const int64_t N = rows.size(0);
    auto g = grad_out[0].to(lse.scalar_type());
    auto grad = torch::empty_like(rows, torch::MemoryFormat::Contiguous);
    for (int64_t start = 0; start < N; start += chunk_rows) {
      int64_t len = std::min(chunk_rows, N - start);
      auto gc = g.narrow(0, start, len).unsqueeze(1);
      auto z = rows.narrow(0, start, len).to(lse.scalar_type());
      auto d = -(z - lse.narrow(0, start, len).unsqueeze(1)).exp() * gc;
      d.scatter_add_(1, ids.narrow(0, start, len).unsqueeze(1), gc);
      grad.narrow(0, start, len).copy_(d);
    }
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};

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
  auto rows = logits.reshape({B * T, V});
  return ChunkedTokenLogprobs::apply(rows, targets.reshape({B * T}), chunk_rows).reshape({B, T});
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
  const auto acc = ReductionType(logits.scalar_type());
  auto rows = logits.reshape({B * T, V});
  std::vector<torch::Tensor> parts;
  for (int64_t start = 0; start < B * T; start += chunk_rows) {
    auto z = rows.narrow(0, start, std::min(chunk_rows, B * T - start)).to(acc);
    auto p = torch::softmax(z, 1);
    parts.push_back(torch::logsumexp(z, {1}) - (p * z).sum(1));
  }
  if (parts.empty()) return torch::zeros({B, T}, logits.options().dtype(acc));
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
