#include "trainer/lm_policy_state.h"

#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "models/actor_critic.h"
#include "models/compute_threads.h"
#include "models/hf_checkpoint.h"
#include "trainer/lm_losses.h"
#include "trainer/lm_metrics.h"
#include "trainer/lr_schedule.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {

absl::StatusOr<GroupBatch> PackGroups(const std::vector<LmGroup>& groups) {
  const int64_t G = static_cast<int64_t>(groups.size());
  int64_t S = 0, L = 1, R = 1;
  for (const auto& g : groups) {
    if (g.prompt.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", g.request_id, " has an empty prompt: nothing predicts its first token"));
    }
    int64_t len = static_cast<int64_t>(g.prompt.size());
    for (const auto& s : g.samples) {
      ++S;
      len += static_cast<int64_t>(s.tokens.size());
      R = std::max<int64_t>(R, s.tokens.size());
    }
    L = std::max(L, len);
  }
  GroupBatch b;
  b.tokens = torch::zeros({G, L}, torch::kLong);
  b.positions = torch::zeros({G, L}, torch::kLong);
  b.segments = torch::full({G, L}, -1, torch::kLong);
  b.shared = torch::full({G, L}, -2, torch::kLong);
  b.source = torch::zeros({S, R}, torch::kLong);
  b.targets = torch::zeros({S, R}, torch::kLong);
  b.mask = torch::zeros({S, R});
  b.old_logp = torch::zeros({S, R});
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto pos = b.positions.accessor<int64_t, 2>();
  auto seg = b.segments.accessor<int64_t, 2>();
  auto shr = b.shared.accessor<int64_t, 2>();
  auto src = b.source.accessor<int64_t, 2>();
  auto tgt = b.targets.accessor<int64_t, 2>();
  auto mask = b.mask.accessor<float, 2>();
  auto old = b.old_logp.accessor<float, 2>();
  int64_t row = 0;
  for (int64_t g = 0; g < G; ++g) {
    const LmGroup& grp = groups[g];
    const int64_t p = static_cast<int64_t>(grp.prompt.size());
    for (int64_t t = 0; t < p; ++t) {
      tok[g][t] = grp.prompt[t];
      pos[g][t] = t;
      seg[g][t] = 0;
    }
    int64_t col = p;
    for (size_t k = 0; k < grp.samples.size(); ++k, ++row) {
      const LmSample& s = grp.samples[k];
      int64_t prev = g * L + p - 1;  // the state that predicts the next token
      for (size_t j = 0; j < s.tokens.size(); ++j, ++col) {
        tok[g][col] = s.tokens[j];
        pos[g][col] = p + static_cast<int64_t>(j);
        seg[g][col] = static_cast<int64_t>(k) + 1;
        shr[g][col] = 0;
        src[row][j] = prev;
        tgt[row][j] = s.tokens[j];
        mask[row][j] = 1;
        old[row][j] = j < s.logprobs.size() ? s.logprobs[j] : 0.0f;
        prev = g * L + col;
      }
    }
  }
  return b;
}

torch::Tensor GroupHidden(models::Transformer& model, const GroupBatch& b) {
  torch::Tensor h = model->Hidden(b.tokens, b.positions, b.segments, b.shared);
  const int64_t H = h.size(2);
  return h.reshape({-1, H})
      .index_select(0, b.source.reshape({-1}))
      .view({b.source.size(0), b.source.size(1), H});
}

absl::StatusOr<torch::Tensor> GroupTokenLogprobs(models::Transformer& model, const GroupBatch& b,
                                                 torch::Tensor* logits_out) {
  torch::Tensor logits = model->Logits(GroupHidden(model, b));
  if (logits_out != nullptr) *logits_out = logits;
  return TokenLogprobs(logits, b.targets);
}

absl::StatusOr<torch::Tensor> ScoreTokenLogprobs(ShardedModel& model, const GroupBatch& b) {
  torch::NoGradGuard ng;
  model.BeginForward();
  absl::StatusOr<torch::Tensor> logp = GroupTokenLogprobs(model.module(), b);
  RETURN_IF_ERROR(model.EndForward());
  return logp;
}

absl::StatusOr<std::unique_ptr<ShardedModel>> LoadFrozenReference(const JobConfig& config,
                                                                  dist::Communicator* comm) {
  ASSIGN_OR_RETURN(std::unique_ptr<ShardedModel> ref,
                   LoadShardedModel(config.model.path, comm,
                                    ShardingOptions(config.trainer, /*trainable=*/false)));
  ref->module()->eval();
  return ref;
}

absl::StatusOr<std::unique_ptr<LmPolicyState>> LmPolicyState::Create(
    const JobConfig& config, const proto::Assignment& assignment) {
  if (config.model.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.path: job.algorithm ", config.job.algorithm->name,
        " starts from a checkpoint (e.g. the SFT stage's runs/<name>/checkpoints/step_<N>)"));
  }
  SetComputeThreads(config.trainer.threads, config.trainer.ranks);
  torch::manual_seed(static_cast<uint64_t>(config.job.seed));
  std::unique_ptr<LmPolicyState> s(new LmPolicyState(config));
  ASSIGN_OR_RETURN(s->comm_, ConnectTrainerRanks(assignment));
  ASSIGN_OR_RETURN(s->policy_, LoadShardedModel(config.model.path, s->comm_.get(),
                                                ShardingOptions(config.trainer, true)));
  return CallCatching([&]() -> absl::StatusOr<std::unique_ptr<LmPolicyState>> {
    s->optimizer_ = std::make_unique<FlatAdamW>(s->policy_->shard_data(), s->policy_->shard_grad(),
                                                AdamWOptions(config.trainer, config.trainer.lr));
    models::Transformer& m = s->policy_->module();
    for (const auto& p : m->named_parameters()) {
      s->flat_offset_[p.key()] = s->flat_numel_;
      s->flat_numel_ += p.value().numel();
    }
    s->layout_hash_ = LayoutHash(*m);
    if (s->comm_->rank() == 0 && config.weights.transport != "zmq") {
      std::string name = absl::StrCat("rlforge-w-", getpid(), "-", assignment.actor_id());
      ASSIGN_OR_RETURN(
          WeightPublisher p,
          WeightPublisher::Create(name, static_cast<size_t>(s->weight_bytes()), s->layout_hash_));
      s->publisher_.emplace(std::move(p));
    }
    return std::move(s);
  });
}

LmPolicyState::~LmPolicyState() = default;

double LmPolicyState::NextLearningRate(int64_t total_steps) {
  const double lr =
      ScheduledLearningRate(config_.trainer, optimizer_steps_++, std::max<int64_t>(1, total_steps));
  optimizer_->set_lr(lr);
  return lr;
}

double LmPolicyState::Step(double max_grad_norm) {
  const double norm = optimizer_->ClipGradNorm(max_grad_norm, comm_.get());
  optimizer_->Step();
  return norm;
}

absl::StatusOr<WorkReply> LmPolicyState::PublishNewVersion() {
  ++version_;
  return Publish();
}

absl::StatusOr<WorkReply> LmPolicyState::Publish() {
  const bool leader = comm_->rank() == 0;
  std::vector<float> inline_flat;
  float* out = nullptr;
  if (leader && publisher_) {
    out = reinterpret_cast<float*>(publisher_->BeginWrite(version_));
  } else if (leader) {
    inline_flat.resize(static_cast<size_t>(flat_numel_));
    out = inline_flat.data();
  }
  RETURN_IF_ERROR(policy_->GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
    if (out == nullptr) return absl::OkStatus();
    for (const ShardedParam& p : unit.params) {
      std::memcpy(out + flat_offset_.at(p.name), flat.data_ptr<float>() + p.offset,
                  static_cast<size_t>(p.numel) * sizeof(float));
    }
    return absl::OkStatus();
  }));
  WorkReply reply;
  if (!leader) return reply;
  if (publisher_) {
    *reply.result.mutable_weights() = publisher_->EndWrite(version_);
  } else {
    *reply.result.mutable_weights() = InlineWeights(version_, inline_flat, layout_hash_);
    reply.tensors.push_back(TensorFrame::FromVector("weights", inline_flat));
  }
  return reply;
}

}  // namespace rlforge
