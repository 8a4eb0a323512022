#include "trainer/grpo_trainer_role.h"

#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "models/actor_critic.h"
#include "models/hf_checkpoint.h"
#include "proto/lm_groups.h"
#include "trainer/lm_losses.h"
#include "trainer/lm_metrics.h"

namespace rlforge {

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Rows prompt + response, right-padded. Column t of the [B, T-1] tensors is the prediction
// of token t+1: mask is 1 where that token is a response token.
struct PaddedBatch {
  torch::Tensor tokens, positions, segments;  // [B, T]
  torch::Tensor targets, mask, old_logp;      // [B, T-1]
};

PaddedBatch Pad(const std::vector<LmGroup>& groups) {
  int64_t rows = 0, width = 0;
  for (const auto& g : groups) {
    for (const auto& s : g.samples) {
      ++rows;
      width = std::max<int64_t>(width, g.prompt.size() + s.tokens.size());
    }
  }
  PaddedBatch b;
  b.tokens = torch::zeros({rows, width}, torch::kLong);
  b.segments = torch::full({rows, width}, -1, torch::kLong);
  b.positions = torch::arange(width, torch::kLong).unsqueeze(0).expand({rows, width}).contiguous();
  b.mask = torch::zeros({rows, width - 1});
  b.old_logp = torch::zeros({rows, width - 1});
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto seg = b.segments.accessor<int64_t, 2>();
  auto mask = b.mask.accessor<float, 2>();
  auto old = b.old_logp.accessor<float, 2>();
  int64_t r = 0;
  for (const auto& g : groups) {
    const int64_t p = static_cast<int64_t>(g.prompt.size());
    for (const auto& s : g.samples) {
      for (int64_t t = 0; t < p; ++t) tok[r][t] = g.prompt[t];
      for (size_t j = 0; j < s.tokens.size(); ++j) {
        tok[r][p + j] = s.tokens[j];
        mask[r][p + j - 1] = 1;
        old[r][p + j - 1] = s.logprobs[j];
      }
      for (int64_t t = 0; t < p + static_cast<int64_t>(s.tokens.size()); ++t) seg[r][t] = 0;
      ++r;
    }
  }
  b.targets = b.tokens.slice(1, 1).contiguous();
  return b;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Role>> GrpoTrainerRole::Create(
    const JobConfig& config, const proto::Assignment& assignment) {
  if (config.model.path.empty()) {
    return absl::InvalidArgumentError(
        "model.path: job.algorithm grpo starts from a checkpoint (e.g. the SFT stage's "
        "runs/<name>/checkpoints/step_<N>)");
  }
  std::unique_ptr<GrpoTrainerRole> role(new GrpoTrainerRole(config));
  if (config.trainer.threads > 0) torch::set_num_threads(static_cast<int>(config.trainer.threads));
  torch::manual_seed(static_cast<uint64_t>(config.job.seed));
  try {
    ASSIGN_OR_RETURN(models::Transformer policy,
                     models::LoadHfModel(config.model.path, torch::kFloat32));
    role->policy_ = policy;
    if (config.grpo.kl_beta > 0) {
      ASSIGN_OR_RETURN(models::Transformer ref,
                       models::LoadHfModel(config.model.path, torch::kFloat32));
      ref->eval();
      for (auto& p : ref->parameters()) p.set_requires_grad(false);
      role->reference_ = ref;
    }
    FlatAdamW::Options o;
    o.lr = config.trainer.lr;
    o.beta1 = config.trainer.adam_beta1;
    o.beta2 = config.trainer.adam_beta2;
    o.eps = config.trainer.adam_eps;
    o.weight_decay = config.trainer.weight_decay;
    role->optimizer_ = std::make_unique<FlatAdamW>((*role->policy_)->parameters(), o);
    role->flat_.resize(static_cast<size_t>(FlatSize(**role->policy_)));
    if (config.weights.transport != "zmq") {
      std::string name = absl::StrCat("rlforge-w-", getpid(), "-", assignment.actor_id());
      ASSIGN_OR_RETURN(WeightPublisher p,
                       WeightPublisher::Create(name, role->flat_.size() * sizeof(float),
                                               LayoutHash(**role->policy_)));
      role->publisher_.emplace(std::move(p));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
  return std::unique_ptr<Role>(std::move(role));
}

absl::StatusOr<WorkReply> GrpoTrainerRole::Handle(const proto::WorkRequest& request,
                                                  std::vector<TensorFrame> tensors) {
  try {
    if (request.task_case() == proto::WorkRequest::kGrpoTrain) {
      return Train(request.grpo_train(), tensors);
    }
    return absl::InvalidArgumentError("the GRPO trainer takes grpo_train work");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
}

WorkReply GrpoTrainerRole::Publish() {
  FlattenInto(**policy_, flat_.data());
  WorkReply reply;
  if (publisher_) {
    *reply.result.mutable_weights() = publisher_->Publish(version_, flat_.data());
  } else {
    proto::WeightsReady* w = reply.result.mutable_weights();
    w->set_version(version_);
    w->set_location("inline");
    w->set_nbytes(flat_.size() * sizeof(float));
    w->set_checksum(WeightChecksum(flat_.data(), flat_.size() * sizeof(float)));
    w->set_layout_hash(LayoutHash(**policy_));
    reply.tensors.push_back(TensorFrame::FromVector("weights", flat_));
  }
  return reply;
}

absl::StatusOr<WorkReply> GrpoTrainerRole::Train(const proto::GrpoTrain& task,
                                                 const std::vector<TensorFrame>& tensors) {
  const auto t0 = std::chrono::steady_clock::now();
  const GrpoOptions& g = config_.grpo;
  const int64_t n = task.group_size();
  ASSIGN_OR_RETURN(std::vector<LmGroup> groups, GroupsFromFrames(tensors, true, n));
  const TensorFrame* rf = FindFrame(tensors, "rewards");
  const int64_t rows = static_cast<int64_t>(groups.size()) * n;
  if (rf == nullptr || rf->dtype() != proto::F32 || rf->numel() != rows) {
    return absl::InvalidArgumentError(absl::StrCat("grpo batch needs f32 rewards, one per sample (",
                                                   rows, ")"));
  }
  for (const auto& grp : groups) {
    for (const auto& s : grp.samples) {
      if (s.tokens.empty()) return absl::InvalidArgumentError("a sample has no response tokens");
      for (int64_t v : s.versions) {
        if (v != version_) {
          return absl::FailedPreconditionError(absl::StrCat(
              "a sample of request ", grp.request_id, " was generated by policy version ", v,
              " but the trainer holds version ", version_, " (synchronous GRPO allows no lag)"));
        }
      }
    }
  }
  torch::Tensor rewards = torch::from_blob(const_cast<void*>(rf->data()), {rows}).clone();
  GroupAdvantageOptions ao;
  ao.group_size = n;
  ao.scale_by_std = g.scale_by_std;
  ASSIGN_OR_RETURN(GroupAdvantages adv, ComputeGroupAdvantages(rewards, ao));
  std::vector<int64_t> kept_groups;
  for (int64_t i = 0; i < static_cast<int64_t>(groups.size()); ++i) {
    if (!g.filter_degenerate || !adv.degenerate[i].item<bool>()) kept_groups.push_back(i);
  }
  WorkReply reply;
  auto metric = [&](const std::string& k, double v) { (*reply.result.mutable_metrics())[k] = v; };
  metric("degenerate_groups", static_cast<double>(adv.num_degenerate));
  metric("groups", static_cast<double>(groups.size()));
  if (kept_groups.empty()) {  // nothing to learn from: same version, no step
    reply = Publish();
    metric("degenerate_groups", static_cast<double>(adv.num_degenerate));
    metric("skipped_update", 1);
    return reply;
  }
  ASSIGN_OR_RETURN(LossAggregation agg, ParseLossAggregation(g.loss_aggregation));
  ASSIGN_OR_RETURN(KlEstimator kl_est, ParseKlEstimator(g.kl_estimator));
  LmPolicyLossOptions lo;
  lo.clip.clip_low = g.clip_low;
  lo.clip.clip_high = g.clip_high;
  lo.clip.dual_clip = g.dual_clip;
  lo.aggregation = agg;
  lo.norm_length = static_cast<double>(g.max_new_tokens);
  lo.kl_beta = g.kl_beta;
  lo.kl_estimator = kl_est;

  models::Transformer& policy = *policy_;
  policy->train();
  std::map<std::string, double> sums;
  int64_t updates = 0;
  const int64_t mb_groups =
      (static_cast<int64_t>(kept_groups.size()) + g.minibatches - 1) / g.minibatches;
  for (int64_t epoch = 0; epoch < g.epochs; ++epoch) {
    for (size_t start = 0; start < kept_groups.size(); start += mb_groups) {
      std::vector<LmGroup> mb;
      std::vector<int64_t> rows_idx;
      for (size_t k = start; k < std::min(kept_groups.size(), start + mb_groups); ++k) {
        mb.push_back(groups[kept_groups[k]]);
        for (int64_t j = 0; j < n; ++j) rows_idx.push_back(kept_groups[k] * n + j);
      }
      PaddedBatch b = Pad(mb);
      torch::Tensor a = adv.advantages.index_select(0, torch::tensor(rows_idx, torch::kLong));
      torch::Tensor logits = policy->Logits(policy->Hidden(b.tokens, b.positions, b.segments));
      logits = logits.slice(1, 0, logits.size(1) - 1);
      ASSIGN_OR_RETURN(torch::Tensor logp, TokenLogprobs(logits, b.targets));
      LmPolicyLossInput in;
      in.logp = logp;
      in.old_logp = b.old_logp;
      in.advantages = a;
      in.mask = b.mask;
      if (reference_) {
        torch::NoGradGuard ng;
        torch::Tensor rl = (*reference_)->Logits((*reference_)->Hidden(b.tokens, b.positions,
                                                                         b.segments));
        ASSIGN_OR_RETURN(in.ref_logp, TokenLogprobs(rl.slice(1, 0, rl.size(1) - 1), b.targets));
      }
      ASSIGN_OR_RETURN(LmPolicyLoss loss, ComputeLmPolicyLoss(in, lo));
      if (epoch == 0) {
        torch::NoGradGuard ng;
        ASSIGN_OR_RETURN(LogprobMismatch mm, ComputeLogprobMismatch(b.old_logp, logp, b.mask));
        sums["logprob_mismatch_mean"] += mm.mean_abs;
        sums["logprob_mismatch_max"] = std::max(sums["logprob_mismatch_max"], mm.max_abs);
        ASSIGN_OR_RETURN(torch::Tensor ent, TokenEntropy(logits.detach()));
        sums["entropy"] += MaskedMean(ent, b.mask).item<double>();
      }
      optimizer_->ZeroGrad();
      loss.loss.backward();
      sums["grad_norm"] += optimizer_->ClipGradNorm(config_.trainer.max_grad_norm);
      optimizer_->Step();
      sums["loss"] += loss.loss.item<double>();
      sums["kl"] += loss.kl;
      sums["clipfrac_low"] += loss.clipfrac_low;
      sums["clipfrac_high"] += loss.clipfrac_high;
      sums["approx_kl"] += loss.approx_kl;
      ++updates;
    }
  }
  policy->eval();
  ++version_;
  const double train_s = Since(t0);
  const auto p0 = std::chrono::steady_clock::now();
  reply = Publish();
  const int64_t first_epoch_updates = updates / g.epochs;
  for (const auto& [k, v] : sums) {
    const bool per_first_epoch = k == "logprob_mismatch_mean" || k == "entropy";
    if (k == "logprob_mismatch_max") {
      metric(k, v);
    } else {
      metric(k, v / static_cast<double>(per_first_epoch ? first_epoch_updates : updates));
    }
  }
  metric("degenerate_groups", static_cast<double>(adv.num_degenerate));
  metric("groups", static_cast<double>(groups.size()));
  metric("update_s", train_s);
  metric("publish_s", Since(p0));
  metric("weight_bytes", static_cast<double>(flat_.size() * sizeof(float)));
  return reply;
}

}  // namespace rlforge
