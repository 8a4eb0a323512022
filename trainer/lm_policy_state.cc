#include "trainer/lm_policy_state.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "models/actor_critic.h"
#include "models/hf_checkpoint.h"
#include "trainer/lm_losses.h"
#include "trainer/lm_metrics.h"
#include "trainer/lr_schedule.h"

namespace rlforge {

PaddedBatch PadGroups(const std::vector<LmGroup>& groups) {
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
        old[r][p + j - 1] = j < s.logprobs.size() ? s.logprobs[j] : 0.0f;
      }
      for (int64_t t = 0; t < p + static_cast<int64_t>(s.tokens.size()); ++t) seg[r][t] = 0;
      ++r;
    }
  }
  b.targets = b.tokens.slice(1, 1).contiguous();
  return b;
}

absl::StatusOr<torch::Tensor> BatchTokenLogprobs(models::Transformer& model, const PaddedBatch& b,
                                                 torch::Tensor* logits_out) {
  torch::Tensor logits = model->Logits(model->Hidden(b.tokens, b.positions, b.segments));
  logits = logits.slice(1, 0, logits.size(1) - 1);
  if (logits_out != nullptr) *logits_out = logits;
  return TokenLogprobs(logits, b.targets);
}

absl::StatusOr<models::Transformer> LoadFrozenReference(const JobConfig& config) {
  ASSIGN_OR_RETURN(models::Transformer ref,
                   models::LoadHfModel(config.model.path, torch::kFloat32));
  ref->eval();
  for (auto& p : ref->parameters()) p.set_requires_grad(false);
  return ref;
}

FlatAdamW::Options AdamWOptions(const TrainerOptions& t, double lr) {
  FlatAdamW::Options o;
  o.lr = lr;
  o.beta1 = t.adam_beta1;
  o.beta2 = t.adam_beta2;
  o.eps = t.adam_eps;
  o.weight_decay = t.weight_decay;
  return o;
}

absl::StatusOr<std::unique_ptr<LmPolicyState>> LmPolicyState::Create(
    const JobConfig& config, const proto::Assignment& assignment) {
  if (config.model.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.path: job.algorithm ", config.job.algorithm,
        " starts from a checkpoint (e.g. the SFT stage's runs/<name>/checkpoints/step_<N>)"));
  }
  if (config.trainer.threads > 0) torch::set_num_threads(static_cast<int>(config.trainer.threads));
  torch::manual_seed(static_cast<uint64_t>(config.job.seed));
  try {
    ASSIGN_OR_RETURN(models::Transformer policy,
                     models::LoadHfModel(config.model.path, torch::kFloat32));
    std::unique_ptr<LmPolicyState> s(new LmPolicyState(config, policy));
    s->optimizer_ = std::make_unique<FlatAdamW>(s->policy_->parameters(),
                                                AdamWOptions(config.trainer, config.trainer.lr));
    s->flat_.resize(static_cast<size_t>(FlatSize(*s->policy_)));
    if (config.weights.transport != "zmq") {
      std::string name = absl::StrCat("rlforge-w-", getpid(), "-", assignment.actor_id());
      ASSIGN_OR_RETURN(WeightPublisher p,
                       WeightPublisher::Create(name, s->flat_.size() * sizeof(float),
                                               LayoutHash(*s->policy_)));
      s->publisher_.emplace(std::move(p));
    }
    return s;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
}

double LmPolicyState::NextLearningRate(int64_t total_steps) {
  const double lr = ScheduledLearningRate(config_.trainer, optimizer_steps_++,
                                          std::max<int64_t>(1, total_steps));
  optimizer_->set_lr(lr);
  return lr;
}

double LmPolicyState::Step(double max_grad_norm) {
  const double norm = optimizer_->ClipGradNorm(max_grad_norm);
  optimizer_->Step();
  return norm;
}

WorkReply LmPolicyState::PublishNewVersion() {
  ++version_;
  return Publish();
}

WorkReply LmPolicyState::Publish() {
  FlattenInto(*policy_, flat_.data());
  WorkReply reply;
  if (publisher_) {
    *reply.result.mutable_weights() = publisher_->Publish(version_, flat_.data());
  } else {
    proto::WeightsReady* w = reply.result.mutable_weights();
    w->set_version(version_);
    w->set_location("inline");
    w->set_nbytes(flat_.size() * sizeof(float));
    w->set_checksum(WeightChecksum(flat_.data(), flat_.size() * sizeof(float)));
    w->set_layout_hash(LayoutHash(*policy_));
    reply.tensors.push_back(TensorFrame::FromVector("weights", flat_));
  }
  return reply;
}

}  // namespace rlforge
