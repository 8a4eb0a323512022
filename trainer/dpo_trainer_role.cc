#include "trainer/dpo_trainer_role.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "proto/lm_groups.h"
#include "trainer/dpo_loss.h"

namespace rlforge {

namespace {

// Rows 2i (chosen) and 2i+1 (rejected) of a [2P] tensor.
std::pair<torch::Tensor, torch::Tensor> SplitPairs(const torch::Tensor& seq) {
  torch::Tensor pairs = seq.view({-1, 2});
  return {pairs.select(1, 0), pairs.select(1, 1)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Role>> DpoTrainerRole::Create(const JobConfig& config,
                                                             const proto::Assignment& assignment) {
  std::unique_ptr<DpoTrainerRole> role(new DpoTrainerRole(config));
  ASSIGN_OR_RETURN(role->state_, LmPolicyState::Create(role->config_, assignment));
  RETURN_IF_ERROR(CallCatching([&]() -> absl::Status {
    ASSIGN_OR_RETURN(models::Transformer ref, LoadFrozenReference(config));
    role->reference_ = ref;
    return absl::OkStatus();
  }));
  return std::unique_ptr<Role>(std::move(role));
}

absl::StatusOr<WorkReply> DpoTrainerRole::Handle(const proto::WorkRequest& request,
                                                 std::vector<TensorFrame> tensors) {
  return CallCatching([&]() -> absl::StatusOr<WorkReply> {
    if (request.task_case() == proto::WorkRequest::kDpoTrain) return Train(tensors);
    return absl::InvalidArgumentError("the dpo trainer takes dpo_train work");
  });
}

absl::StatusOr<WorkReply> DpoTrainerRole::Train(const std::vector<TensorFrame>& tensors) {
  const Stopwatch timer;
  const DpoJobOptions& d = config_.dpo;
  ASSIGN_OR_RETURN(std::vector<LmGroup> pairs, GroupsFromFrames(tensors, true, 2));
  if (pairs.empty()) return absl::InvalidArgumentError("dpo_train: no pairs");
  for (const auto& p : pairs) {
    if (p.samples[0].tokens.empty() || p.samples[1].tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("dpo_train: pair ", p.request_id,
                                                     " has an empty chosen or rejected answer"));
    }
  }
  ASSIGN_OR_RETURN(GroupBatch b, PackGroups(pairs));
  DpoInput in;
  std::map<std::string, double> out;
  {
    torch::NoGradGuard ng;
    const Stopwatch ref_timer;
    ASSIGN_OR_RETURN(torch::Tensor ref_logp, GroupTokenLogprobs(*reference_, b));
    out["reference_s"] = ref_timer.Seconds();
    ASSIGN_OR_RETURN(torch::Tensor ref_seq, SequenceLogprobs(ref_logp, b.mask));
    std::tie(in.ref_chosen_logp, in.ref_rejected_logp) = SplitPairs(ref_seq);
  }
  DpoOptions o;
  ASSIGN_OR_RETURN(o.type, ParseDpoLossType(d.loss_type));
  o.beta = d.beta;
  o.label_smoothing = d.label_smoothing;

  models::Transformer& policy = state_->policy();
  policy->train();
  for (int64_t epoch = 0; epoch < d.epochs; ++epoch) {
    ASSIGN_OR_RETURN(torch::Tensor logp, GroupTokenLogprobs(policy, b));
    ASSIGN_OR_RETURN(torch::Tensor seq, SequenceLogprobs(logp, b.mask));
    std::tie(in.chosen_logp, in.rejected_logp) = SplitPairs(seq);
    ASSIGN_OR_RETURN(DpoLoss loss, ComputeDpoLoss(in, o));
    if (epoch == 0) {  // before any update on these pairs
      out["dpo/loss"] = loss.loss.item<double>();
      out["dpo/margin"] = loss.margin;
      out["dpo/accuracy"] = loss.accuracy;
      out["dpo/chosen_reward"] = loss.chosen_reward;
      out["dpo/rejected_reward"] = loss.rejected_reward;
      out["dpo/logp_gap"] = (in.chosen_logp - in.rejected_logp).mean().item<double>();
      out["dpo/ref_logp_gap"] = (in.ref_chosen_logp - in.ref_rejected_logp).mean().item<double>();
    }
    out["lr"] = state_->NextLearningRate(config_.job.iterations * d.epochs);
    state_->optimizer().ZeroGrad();
    loss.loss.backward();
    out["grad_norm"] += state_->Step(config_.trainer.max_grad_norm) / static_cast<double>(d.epochs);
  }
  policy->eval();
  const double train_s = timer.Seconds();
  WorkReply reply = state_->PublishNewVersion();
  out["pairs"] = static_cast<double>(pairs.size());
  out["update_s"] = train_s;
  out["weight_bytes"] = static_cast<double>(state_->weight_bytes());
  for (const auto& [k, v] : out) (*reply.result.mutable_metrics())[k] = v;
  return reply;
}

}  // namespace rlforge
