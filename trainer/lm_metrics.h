// Per-token quantities of language-model training: logprobs and entropy from logits (in row
// chunks, to bound memory), and metrics over a response mask.
//
// logits [B, T, V], targets [B, T] -> TokenLogprobs [B, T], TokenEntropy [B, T]
// logp, old_logp, rollout_logp, advantages, mask [B, T] -> clip fractions, approx KL, mismatch
//
// Same conventions as trainer/lm_losses.h: [B, T] tensors with a float response mask; shape
// errors come back as a Status naming the argument.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlforge {

// OK when t is defined with exactly `shape`; otherwise an error naming `name`.
absl::Status CheckShape(const torch::Tensor& t, std::string_view name, at::IntArrayRef shape);
// OK when t is a defined 2-d ([B, T]) tensor; otherwise an error naming `name`.
absl::Status CheckTokenTensor(const torch::Tensor& t, std::string_view name);
// "[2, 3]", or "an undefined tensor", for error messages.
std::string DescribeShape(const torch::Tensor& t);

// sum(x * mask) / max(sum(mask), 1), a 0-d tensor (keeps gradient).
torch::Tensor MaskedMean(const torch::Tensor& x, const torch::Tensor& mask);

// log softmax(logits)[targets] [B, T], as logits[target] - logsumexp(logits), computed over
// chunk_rows of the B*T rows at a time, with its own backward (onehot - softmax, chunk by
// chunk): no [B, T, V] log-softmax is materialised or kept, only logits itself and one
// logsumexp per row; the backward allocates the logits' gradient once. Half/bfloat16 logits are
// reduced in float32 and the result is float32. targets are int64 in [0, V). Divide logits by
// the sampling temperature first. Not twice differentiable.
absl::StatusOr<torch::Tensor> TokenLogprobs(const torch::Tensor& logits,
                                            const torch::Tensor& targets,
                                            int64_t chunk_rows = 1024);

// Entropy of softmax(logits) per position [B, T] = logsumexp(z) - sum(softmax(z) * z), in row
// chunks. Call under torch::NoGradGuard for metrics (then only one chunk of temporaries is
// alive at a time); with gradient it can serve as an entropy bonus.
absl::StatusOr<torch::Tensor> TokenEntropy(const torch::Tensor& logits, int64_t chunk_rows = 1024);

struct ClipFractions {
  double low = 0;   // A < 0 and ratio < 1 - clip_low: the lower bound removed the gradient
  double high = 0;  // A > 0 and ratio > 1 + clip_high: the upper bound removed the gradient
  double dual = 0;  // A < 0 and ratio > dual_clip (when dual_clip > 1)
};

// Masked shares of tokens in each clipped region; ratio = exp(logp - old_logp), advantages
// [B] or [B, T].
absl::StatusOr<ClipFractions> ComputeClipFractions(const torch::Tensor& logp,
                                                   const torch::Tensor& old_logp,
                                                   const torch::Tensor& advantages,
                                                   const torch::Tensor& mask, double clip_low,
                                                   double clip_high, double dual_clip);

// Masked mean of (r - 1) - log r with r = exp(logp - old_logp): the k3 estimate of
// KL(old || new) from tokens sampled by the old policy (same as trainer/ppo_loss.h).
absl::StatusOr<double> ApproxKl(const torch::Tensor& logp, const torch::Tensor& old_logp,
                                const torch::Tensor& mask);

// How far the rollout engine's logprobs are from the trainer's for the same tokens.
struct LogprobMismatch {
  double mean_abs = 0;  // masked mean |trainer - rollout|
  double max_abs = 0;   // max over response tokens
  double k3 = 0;        // KL(rollout || trainer) estimate, ApproxKl(trainer, rollout)
};
absl::StatusOr<LogprobMismatch> ComputeLogprobMismatch(const torch::Tensor& rollout_logp,
                                                       const torch::Tensor& trainer_logp,
                                                       const torch::Tensor& mask);

}  // namespace rlforge
