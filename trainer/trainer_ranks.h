// What a trainer rank needs to train with its peers: the group, the sharding options, a
// fair share of each batch, and sums over ranks.
//
// Assignment (rank, world size, store address) -> ConnectTrainerRanks -> Communicator
// batch items with token costs -> ShareOf(rank) -> this rank's items -> losses weighted by
//   LossShareWeight (local / global denominator) -> gradients summed over ranks = the
//   gradient of the loss over the global batch, as one rank would compute it
//
// Every rank walks the same batch in the same order and computes the same splits, so no
// rank waits for data from another; a rank whose share is empty trains on the first item
// with weight 0 (its collectives must still run).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/setup_progress.h"
#include "config/job_config.h"
#include "dist/communicator.h"
#include "proto/control.pb.h"
#include "proto/lm_groups.h"
#include "trainer/lm_losses.h"
#include "trainer/sharded_model.h"

namespace rlforge {

// The group of this job's trainer ranks (a group of one without a store address), on the
// device trainer.device resolves to for this rank: gloo on the CPU, NCCL on a GPU.
absl::StatusOr<std::unique_ptr<dist::Communicator>> ConnectTrainerRanks(
    const proto::Assignment& assignment, const TrainerOptions& trainer);

// trainer.reshard_after_forward, trainer.mixed_precision and trainer.device (resolved for
// `rank` by models::TorchDevice; an error names the key, its value and the rank).
absl::StatusOr<ShardedModel::Options> ShardingOptions(const TrainerOptions& trainer, int rank,
                                                      bool trainable);

// Loads a Hugging Face checkpoint sharded over `comm`, each rank reading only its slice
// (with `value_head`: the checkpoint's value head, or zeros when it has none). `progress`
// hears "<what> N%" as the model is built and read.
absl::StatusOr<std::unique_ptr<ShardedModel>> LoadShardedModel(
    const std::string& path, dist::Communicator* comm, ShardedModel::Options options,
    bool value_head = false, const SetupProgress& progress = {},
    const std::string& what = "loading model");

// Items [begin, end) of a batch that `rank` of `size` takes: contiguous, balanced by the
// items' costs (tokens). An empty share is {0, 1} with `weight_zero` set.
struct Share {
  size_t begin = 0, end = 0;
  bool weight_zero = false;
};
Share ShareOf(const std::vector<int64_t>& costs, int rank, int size);

// The work each group costs: its prompt once and every response token.
std::vector<int64_t> GroupCosts(const std::vector<LmGroup>& groups);

// Per-token values [S_r, R_r] a rank computed for its share of a batch of groups (n samples
// each; rows of groups share.begin..end) placed into the whole batch's [S, R] and summed over
// the ranks: every rank gets the whole batch's values. A weight-zero share adds nothing.
absl::StatusOr<torch::Tensor> AssembleRows(dist::Communicator& comm, const torch::Tensor& part,
                                           const Share& share, int64_t group_size, int64_t rows,
                                           int64_t width);

// Elementwise sums over the group (values as doubles); fails naming the collective.
absl::StatusOr<std::vector<double>> SumOverRanks(dist::Communicator& comm,
                                                 const std::vector<double>& values);

// This rank's share of a minibatch against the global one: the weights that turn a loss
// aggregated over the share into its part of the global batch's loss. Rows the minibatch
// leaves out of the forward (their loss terms are exactly 0) still count in the loss's
// denominator, so the loss is the whole minibatch's; metrics average over the computed ones.
struct ShareCounts {
  double tokens = 0, rows = 0;                    // this rank's (0 for a weight-zero share)
  double global_tokens = 0, global_rows = 0;      // summed over ranks
  double left_out_tokens = 0, left_out_rows = 0;  // the minibatch's, on no rank
  // local / global denominator of `agg`: tokens for token-mean, sequences otherwise.
  double Weight(LossAggregation agg) const;
  // local / global computed tokens: the weight of a per-token metric's mean.
  double token_weight() const { return global_tokens > 0 ? tokens / global_tokens : 0; }
};
// Counts mask [rows, T]'s tokens and rows and sums them over the group; `left_out_*` are
// the minibatch's rows left out of every rank's forward.
absl::StatusOr<ShareCounts> CountShare(dist::Communicator& comm, const torch::Tensor& mask,
                                       bool weight_zero, double left_out_tokens = 0,
                                       double left_out_rows = 0);

// The largest of each rank's `value`.
absl::StatusOr<double> MaxOverRanks(dist::Communicator& comm, double value);

// The whole model, gathered unit by unit into an unsharded copy on rank 0 (nullopt on the
// other ranks, which only take part in the gathers). For work one rank does alone:
// greedy evaluation, an HF checkpoint.
absl::StatusOr<std::optional<models::Transformer>> GatherFullModel(ShardedModel& m);

}  // namespace rlforge
