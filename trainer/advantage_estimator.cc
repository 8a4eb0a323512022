#include "trainer/advantage_estimator.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/status.h"
#include "models/hf_checkpoint.h"
#include "trainer/flat_adamw.h"
#include "trainer/lm_losses.h"
#include "trainer/lm_metrics.h"
#include "trainer/ppo_loss.h"
#include "trainer/sharded_checkpoint.h"
#include "trainer/token_ppo.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {

namespace {

// grpo, drgrpo and rloo: one advantage per sample, from the rewards of its group alone.
class GroupEstimator final : public AdvantageEstimator {
 public:
  GroupEstimator(AdvantageKind kind, bool filter_degenerate)
      : kind_(kind), filter_degenerate_(filter_degenerate) {}

  absl::Status Prepare(const std::vector<LmGroup>& groups, const torch::Tensor& rewards,
                       std::map<std::string, double>& out) override {
    const int64_t g = static_cast<int64_t>(groups.size());
    GroupAdvantageOptions ao;
    ao.group_size = g > 0 ? rewards.size(0) / g : 0;
    ao.scale_by_std = kind_ == AdvantageKind::kGroupNorm;
    ASSIGN_OR_RETURN(GroupAdvantages adv, ComputeGroupAdvantages(rewards, ao));
    advantages_ = adv.advantages;
    if (kind_ == AdvantageKind::kLeaveOneOut) {
      ASSIGN_OR_RETURN(advantages_, LeaveOneOutAdvantages(rewards, ao.group_size));
    }
    kept_.clear();
    zero_groups_.clear();
    const torch::Tensor degenerate = adv.degenerate.to(torch::kUInt8).contiguous();
    const torch::Tensor zero =
        g > 0 ? advantages_.reshape({g, -1}).eq(0).all(1).to(torch::kUInt8).contiguous()
              : torch::zeros({0}, torch::kUInt8);
    for (int64_t i = 0; i < g; ++i) {
      if (!filter_degenerate_ || degenerate.data_ptr<uint8_t>()[i] == 0) kept_.push_back(i);
      zero_groups_.push_back(zero.data_ptr<uint8_t>()[i] != 0);
    }
    out["degenerate_groups"] = static_cast<double>(adv.num_degenerate);
    return absl::OkStatus();
  }

  torch::Tensor Rows(const torch::Tensor& idx, int64_t /*width*/) const override {
    return advantages_.index_select(0, idx);
  }

  bool GroupAdvantagesAreZero(int64_t group) const override {
    return zero_groups_[static_cast<size_t>(group)];
  }

 private:
  AdvantageKind kind_;
  bool filter_degenerate_;
  torch::Tensor advantages_;       // [S]
  std::vector<bool> zero_groups_;  // per group: every advantage exactly 0
};

// lm_ppo: a critic's values and token-level GAE, the KL to the reference as a per-token
// reward penalty; the critic is fitted to the returns with the clipped value loss.
class CriticEstimator final : public AdvantageEstimator {
 public:
  static absl::StatusOr<std::unique_ptr<AdvantageEstimator>> Create(const JobConfig& config,
                                                                    ShardedModel* reference,
                                                                    dist::Communicator* comm) {
    std::unique_ptr<CriticEstimator> e(new CriticEstimator(config, reference, comm));
    ASSIGN_OR_RETURN(const ShardedModel::Options options,
                     ShardingOptions(config.trainer, comm->rank(), /*trainable=*/true));
    ASSIGN_OR_RETURN(e->critic_,
                     LoadShardedModel(config.model.path, comm, options, /*value_head=*/true));
    ASSIGN_OR_RETURN(e->loss_aggregation_, LossAggregationOf(config.grpo));
    e->kl_estimator_ = config.grpo.kl_estimator;
    e->optimizer_ = std::make_unique<FlatAdamW>(e->critic_->shard_data(), e->critic_->shard_grad(),
                                                AdamWOptions(config.trainer, config.critic.lr));
    return std::unique_ptr<AdvantageEstimator>(std::move(e));
  }

  absl::Status Prepare(const std::vector<LmGroup>& groups, const torch::Tensor& rewards,
                       std::map<std::string, double>& out) override {
    kept_.clear();
    for (int64_t i = 0; i < static_cast<int64_t>(groups.size()); ++i) kept_.push_back(i);
    // Each rank scores its share of the groups; the shares are summed into the whole
    // batch's (every minibatch share's advantages need them).
    torch::NoGradGuard ng;
    const torch::Device device = critic_->device();
    ASSIGN_OR_RETURN(const GroupBatch packed, PackGroups(groups));
    const GroupBatch full = ToDevice(packed, device);
    const Share share = ShareOf(GroupCosts(groups), comm_->rank(), comm_->size());
    const bool whole = !share.weight_zero && share.begin == 0 && share.end == groups.size();
    GroupBatch mine = full;  // one rank: its share is the batch, packed once
    if (!whole) {
      ASSIGN_OR_RETURN(mine, PackGroups(std::vector<LmGroup>(groups.begin() + share.begin,
                                                             groups.begin() + share.end)));
      mine = ToDevice(mine, device);
    }
    const int64_t n = rewards.size(0) / std::max<int64_t>(1, groups.size());
    const int64_t S = full.mask.size(0), R = full.mask.size(1);
    critic_->module()->eval();
    critic_->BeginForward();
    const torch::Tensor my_values = Values(mine) * mine.mask;
    RETURN_IF_ERROR(critic_->EndForward());
    ASSIGN_OR_RETURN(old_values_, AssembleRows(*comm_, my_values, share, n, S, R));
    torch::Tensor kl;
    double kl_mean = 0;
    if (reference_ != nullptr) {
      const Stopwatch r0;
      ASSIGN_OR_RETURN(const torch::Tensor my_ref,
                       ScoreTokenLogprobs(*reference_, mine, config_.trainer.micro_batch_size));
      ASSIGN_OR_RETURN(torch::Tensor ref_logp, AssembleRows(*comm_, my_ref, share, n, S, R));
      out["reference_s"] += r0.Seconds();
      ASSIGN_OR_RETURN(kl, KlPenalty(full.old_logp, ref_logp, kl_estimator_));
      kl_mean = MaskedMean(kl, full.mask).item<double>();
    }
    ASSIGN_OR_RETURN(torch::Tensor token_rewards,
                     TokenLevelRewards(rewards.to(device), full.mask, kl, config_.grpo.kl_beta));
    TokenGaeOptions go;
    go.gamma = config_.critic.gamma;
    go.lambda = config_.critic.lambda;
    go.whiten = config_.critic.whiten_advantages;
    ASSIGN_OR_RETURN(TokenGaeResult gae, TokenGae(token_rewards, old_values_, full.mask, go));
    advantages_ = gae.advantages;
    returns_ = gae.returns;
    out["kl"] = kl_mean;
    out["value_mean"] = MaskedMean(old_values_, full.mask).item<double>();
    out["return_mean"] = MaskedMean(returns_, full.mask).item<double>();
    const torch::Tensor on = full.mask > 0;
    out["explained_variance"] =
        ExplainedVariance(old_values_.masked_select(on), returns_.masked_select(on));
    return absl::OkStatus();
  }

  torch::Tensor Rows(const torch::Tensor& idx, int64_t width) const override {
    return RowsOf(advantages_, idx, width);
  }
  bool kl_in_loss() const override { return false; }
  bool UpdatesPolicy(int64_t step) const override {
    return step > config_.critic.warmup_iterations;
  }

  absl::Status AfterPolicyStep(const GroupBatch& b, const torch::Tensor& idx,
                               const ShareCounts& counts,
                               std::map<std::string, double>& sums) override {
    const int64_t width = b.mask.size(1);
    critic_->BeginForward();
    ASSIGN_OR_RETURN(TokenValueLoss vl,
                     ComputeTokenValueLoss(Values(b), RowsOf(old_values_, idx, width),
                                           RowsOf(returns_, idx, width), b.mask,
                                           config_.critic.value_clip, loss_aggregation_));
    const double w = counts.Weight(loss_aggregation_);
    optimizer_->ZeroGrad();
    (vl.loss * w).backward();
    RETURN_IF_ERROR(critic_->FinishBackward());
    sums["value_grad_norm"] += optimizer_->ClipGradNorm(config_.trainer.max_grad_norm, comm_);
    optimizer_->Step();
    ASSIGN_OR_RETURN(
        const std::vector<double> global,
        SumOverRanks(*comm_, {vl.loss.item<double>() * w, vl.clipfrac * counts.token_weight()}));
    sums["value_loss"] += global[0];
    sums["value_clipfrac"] += global[1];
    return absl::OkStatus();
  }

  void SetTraining(bool training) override { critic_->module()->train(training); }

  // The critic's learning rate is constant (critic.lr): parameters and moments are all of it.
  absl::Status SaveState(const std::string& dir) override {
    return SaveShardedState(dir + "/critic", *critic_, *optimizer_);
  }
  absl::Status LoadState(const std::string& dir) override {
    return LoadShardedState(dir + "/critic", *critic_, *optimizer_);
  }

 private:
  CriticEstimator(const JobConfig& config, ShardedModel* reference, dist::Communicator* comm)
      : config_(config), reference_(reference), comm_(comm) {}

  // Critic values [S, R]: column j is V(prompt + response tokens before j), the state that
  // emits response token j.
  // Between the critic's BeginForward and its EndForward / FinishBackward.
  torch::Tensor Values(const GroupBatch& b) {
    return critic_->module()->Values(GroupHidden(critic_->module(), b));
  }
  // Responses are left-aligned: a minibatch's width is a prefix of the batch's.
  static torch::Tensor RowsOf(const torch::Tensor& t, const torch::Tensor& idx, int64_t width) {
    return t.index_select(0, idx.to(t.device())).slice(1, 0, width);
  }

  const JobConfig& config_;
  ShardedModel* reference_;
  dist::Communicator* comm_;
  std::unique_ptr<ShardedModel> critic_;
  std::unique_ptr<FlatAdamW> optimizer_;
  LossAggregation loss_aggregation_ = LossAggregation::kTokenMean;
  KlEstimator kl_estimator_ = KlEstimator::kK3;
  torch::Tensor old_values_, advantages_, returns_;  // [S, R] over the whole batch
};

}  // namespace

absl::StatusOr<torch::Tensor> LeaveOneOutAdvantages(const torch::Tensor& rewards,
                                                    int64_t group_size) {
  if (rewards.dim() != 1 || group_size < 2 || rewards.size(0) % group_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("leave-one-out advantages need 1-D rewards in groups of at least 2 "
                     "samples; got shape [",
                     absl::StrJoin(rewards.sizes(), ", "), "] and group size ", group_size));
  }
  const torch::Tensor r = rewards.view({-1, group_size});
  const torch::Tensor others =
      (r.sum(1, /*keepdim=*/true) - r) / static_cast<double>(group_size - 1);
  return (r - others).reshape({-1});
}

absl::StatusOr<std::unique_ptr<AdvantageEstimator>> CreateAdvantageEstimator(
    const JobConfig& config, ShardedModel* reference, dist::Communicator* comm) {
  const AdvantageKind kind = config.job.algorithm->advantage;
  switch (kind) {
    case AdvantageKind::kGroupNorm:
    case AdvantageKind::kGroupMean:
    case AdvantageKind::kLeaveOneOut:
      return std::unique_ptr<AdvantageEstimator>(
          new GroupEstimator(kind, config.grpo.filter_degenerate));
    case AdvantageKind::kTokenGae:
      return CriticEstimator::Create(config, reference, comm);
    case AdvantageKind::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("job.algorithm ", config.job.algorithm->name, " has no advantage estimator"));
}

}  // namespace rlforge
