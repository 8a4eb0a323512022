// Micro-batched logprobs: a minibatch's loss and gradient with the memory of one micro-batch.
//
// GroupBatch -> k micro-batches of whole groups -> forward each without a graph -> logp [S, R]
//   (a leaf) -> loss(logp) -> dloss/dlogp [S, R] -> forward each micro-batch again with a graph
//   and backward (logp_k * dloss/dlogp_k).sum() -> the parameters' gradients accumulate.
//
// Only one micro-batch's activations and [rows, R, vocab] logits are alive at a time; the price
// is one extra forward. The loss always sees the whole minibatch's logprobs, so every loss
// (token or sequence ratios, any aggregation, DPO's pairs) gets the unsplit gradient, within
// fp32 summation rounding (micro_batch_test.cc). With one micro-batch it is the plain single
// pass. Sharded models: every rank calls with the same count (MicroBatchCount agrees on it)
// and runs one collective round per micro-batch; a rank short of groups reruns its first one
// with a zero gradient. One thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "dist/communicator.h"
#include "trainer/lm_policy_state.h"
#include "trainer/sharded_model.h"

namespace rlforge {

// Groups [g0, g1) of `b` as a batch of their own, trimmed to their longest row.
GroupBatch SliceGroups(const GroupBatch& b, int64_t g0, int64_t g1);

// Micro-batches of whole groups holding at most `micro_batch_size` sequences each (at least
// one group), the most any rank needs; 0 means one. Every rank calls it (a collective).
absl::StatusOr<int64_t> MicroBatchCount(dist::Communicator& comm, const GroupBatch& b,
                                        int64_t micro_batch_size);

// The loss of the whole batch from its logprobs [S, R] (with gradient when grad mode is on).
using LogprobLoss = std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor& logp)>;

struct LogprobPass {
  torch::Tensor logp;     // [S, R], what the loss saw
  torch::Tensor entropy;  // [S, R] without gradient, when asked for
};

// Runs `loss` on the batch's logprobs under `model` and, with `backward`, accumulates its
// gradient into the model's (FinishBackward per micro-batch; the caller zeroes and steps);
// without, ends each forward (EndForward). `loss` may be empty (scoring only).
absl::StatusOr<LogprobPass> MicroBatchedLogprobs(ShardedModel& model, const GroupBatch& b,
                                                 int64_t micro_batches, bool backward, bool entropy,
                                                 const LogprobLoss& loss);

}  // namespace rlforge
