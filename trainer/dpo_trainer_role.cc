#include "trainer/dpo_trainer_role.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "proto/lm_groups.h"
#include "trainer/dpo_loss.h"
#include "trainer/micro_batch.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {

namespace {

// Rows 2i (chosen) and 2i+1 (rejected) of a [2P] tensor.
std::pair<torch::Tensor, torch::Tensor> SplitPairs(const torch::Tensor& seq) {
  torch::Tensor pairs = seq.view({-1, 2});
  return {pairs.select(1, 0), pairs.select(1, 1)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Role>> DpoTrainerRole::Create(const JobConfig& config,
                                                             const proto::Assignment& assignment,
                                                             const SetupProgress& progress) {
  std::unique_ptr<DpoTrainerRole> role(new DpoTrainerRole(config));
  ASSIGN_OR_RETURN(role->state_, LmPolicyState::Create(role->config_, assignment, progress));
  ASSIGN_OR_RETURN(role->reference_,
                   LoadFrozenReference(role->config_, &role->state_->comm(), progress));
  return std::unique_ptr<Role>(std::move(role));
}

absl::StatusOr<WorkReply> DpoTrainerRole::Handle(const proto::WorkRequest& request,
                                                 std::vector<TensorFrame> tensors) {
  return CallCatching([&]() -> absl::StatusOr<WorkReply> {
    if (request.task_case() == proto::WorkRequest::kDpoTrain) return Train(tensors);
    if (request.task_case() == proto::WorkRequest::kPublishWeights) {
      return state_->Stream(request.publish_weights());
    }
    // Whole-job checkpoints: the policy and its optimizer; the frozen reference is model.path's
    // weights, loaded again at setup, so it is not saved.
    if (request.task_case() == proto::WorkRequest::kSaveState) {
      RETURN_IF_ERROR(state_->SaveJobState(request.save_state().dir()));
      return WorkReply();
    }
    if (request.task_case() == proto::WorkRequest::kLoadState) {
      RETURN_IF_ERROR(state_->LoadJobState(request.load_state().dir()));
      return state_->Announce();
    }
    return absl::InvalidArgumentError(
        "the dpo trainer takes dpo_train, publish_weights, save_state and load_state work");
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
  dist::Communicator& comm = state_->comm();
  std::vector<int64_t> costs;
  for (const auto& p : pairs) {
    costs.push_back(static_cast<int64_t>(p.prompt.size() + p.samples[0].tokens.size() +
                                         p.samples[1].tokens.size()));
  }
  const Share share = ShareOf(costs, comm.rank(), comm.size());
  ASSIGN_OR_RETURN(
      const GroupBatch packed,
      PackGroups(std::vector<LmGroup>(pairs.begin() + share.begin, pairs.begin() + share.end)));
  const GroupBatch b = ToDevice(packed, state_->policy().device());
  const double local_pairs = share.weight_zero ? 0 : static_cast<double>(share.end - share.begin);
  ASSIGN_OR_RETURN(const std::vector<double> all_pairs, SumOverRanks(comm, {local_pairs}));
  const double w = local_pairs / all_pairs[0];  // the loss is a mean over every rank's pairs
  DpoInput in;
  std::map<std::string, double> out;
  {
    const Stopwatch ref_timer;
    ASSIGN_OR_RETURN(torch::Tensor ref_logp,
                     ScoreTokenLogprobs(*reference_, b, config_.trainer.micro_batch_size));
    out["reference_s"] = ref_timer.Seconds();
    torch::NoGradGuard ng;
    ASSIGN_OR_RETURN(torch::Tensor ref_seq, SequenceLogprobs(ref_logp, b.mask));
    std::tie(in.ref_chosen_logp, in.ref_rejected_logp) = SplitPairs(ref_seq);
  }
  DpoOptions o;
  o.type = d.loss_type;
  o.beta = d.beta;
  o.label_smoothing = d.label_smoothing;

  ShardedModel& policy = state_->policy();
  ASSIGN_OR_RETURN(const int64_t micro, MicroBatchCount(comm, b, config_.trainer.micro_batch_size));
  policy.module()->train();
  for (int64_t epoch = 0; epoch < d.epochs; ++epoch) {
    state_->optimizer().ZeroGrad();
    DpoLoss loss;
    auto dpo_loss = [&](const torch::Tensor& logp) -> absl::StatusOr<torch::Tensor> {
      ASSIGN_OR_RETURN(torch::Tensor seq, SequenceLogprobs(logp, b.mask));
      std::tie(in.chosen_logp, in.rejected_logp) = SplitPairs(seq);
      ASSIGN_OR_RETURN(loss, ComputeDpoLoss(in, o));
      return loss.loss * w;
    };
    RETURN_IF_ERROR(MicroBatchedLogprobs(policy, b, micro, true, false, dpo_loss).status());
    out["lr"] = state_->NextLearningRate(config_.job.iterations * d.epochs);
    out["grad_norm"] += state_->Step(config_.trainer.max_grad_norm) / static_cast<double>(d.epochs);
    if (epoch == 0) {  // measured before any update on these pairs
      torch::NoGradGuard ng;
      const std::vector<double> local = {
          loss.loss.item<double>() * w,
          loss.margin * w,
          loss.accuracy * w,
          loss.chosen_reward * w,
          loss.rejected_reward * w,
          (in.chosen_logp - in.rejected_logp).mean().item<double>() * w,
          (in.ref_chosen_logp - in.ref_rejected_logp).mean().item<double>() * w};
      ASSIGN_OR_RETURN(const std::vector<double> g, SumOverRanks(comm, local));
      const char* keys[] = {"dpo/loss",          "dpo/margin",          "dpo/accuracy",
                            "dpo/chosen_reward", "dpo/rejected_reward", "dpo/logp_gap",
                            "dpo/ref_logp_gap"};
      for (size_t i = 0; i < g.size(); ++i) out[keys[i]] = g[i];
    }
  }
  policy.module()->eval();
  const double train_s = timer.Seconds();
  ASSIGN_OR_RETURN(WorkReply reply, state_->AnnounceNewVersion());
  out["pairs"] = static_cast<double>(pairs.size());
  out["update_s"] = train_s;
  out["weight_bytes"] = static_cast<double>(state_->weight_bytes());
  for (const auto& [k, v] : out) (*reply.result.mutable_metrics())[k] = v;
  return reply;
}

}  // namespace rlforge
