#include "trainer/ppo_trainer_role.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "models/compute_threads.h"
#include "weights/shm_segment.h"
#include "weights/weight_transport.h"

namespace rlforge {

namespace {

// A tensor of the batch, by name, with the expected dtype and leading size.
absl::StatusOr<torch::Tensor> BatchTensor(std::vector<TensorFrame>& tensors,
                                          const std::string& name, DType dtype, int64_t rows) {
  for (auto& t : tensors) {
    if (t.name() != name) continue;
    if (t.dtype() != dtype || t.shape().empty() || t.shape()[0] != rows) {
      return absl::InvalidArgumentError(absl::StrCat("batch tensor ", name, " must be ",
                                                     DTypeName(dtype), " with ", rows, " rows"));
    }
    auto type = dtype == proto::I64 ? torch::kLong : torch::kFloat32;
    return torch::from_blob(t.data(), t.shape(), type).clone();
  }
  return absl::InvalidArgumentError(absl::StrCat("batch has no tensor ", name));
}

}  // namespace

PpoTrainerRole::PpoTrainerRole(const JobConfig& config, const proto::Assignment& assignment)
    : config_(config), assignment_(assignment) {}

absl::StatusOr<WorkReply> PpoTrainerRole::Handle(const proto::WorkRequest& request,
                                                 std::vector<TensorFrame> tensors) {
  return CallCatching([&]() -> absl::StatusOr<WorkReply> {
    switch (request.task_case()) {
      case proto::WorkRequest::kTrainInit:
        return Init(request.train_init());
      case proto::WorkRequest::kTrainStep:
        return Step(request.train_step(), std::move(tensors));
      case proto::WorkRequest::kSaveState:
        return SaveState(request.save_state());
      case proto::WorkRequest::kLoadState:
        return LoadState(request.load_state());
      default:
        return absl::InvalidArgumentError(
            "the PPO trainer takes train_init, train_step, save_state and load_state work");
    }
  });
}

absl::StatusOr<WorkReply> PpoTrainerRole::Init(const proto::TrainInit& init) {
  SetComputeThreads(config_.trainer.threads, config_.trainer.ranks);
  spec_ = init.spec();
  const std::optional<WeightTransport> transport = ParseWeightTransport(init.weights_transport());
  if (!transport.has_value() || *transport == WeightTransport::kAuto) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train_init: '", init.weights_transport(), "' is not a resolved weights transport"));
  }
  learner_ = std::make_unique<PpoLearner>(config_, spec_);
  flat_.resize(static_cast<size_t>(FlatSize(*learner_->model())));
  PolicyStreamOptions o;
  o.segment = PublisherSegmentName(assignment_.actor_id());
  o.tensors = ToTensorSpecs(FlatLayout(*learner_->model()));
  o.layout_hash = LayoutHash(*learner_->model());
  o.bucket_bytes = WeightBucketBytes(config_.weights);
  o.timeout_s = config_.weights.timeout_s;
  ASSIGN_OR_RETURN(publisher_, MakePolicyPublisher(*transport, o));
  return Publish();
}

absl::StatusOr<WorkReply> PpoTrainerRole::Publish() {
  const Stopwatch timer;
  FlattenInto(*learner_->model(), flat_.data());
  ASSIGN_OR_RETURN(PublishedWeights published,
                   publisher_->Publish(learner_->version(), flat_.data()));
  WorkReply reply;
  *reply.result.mutable_weights() = std::move(published.ready);
  reply.tensors = std::move(published.frames);
  (*reply.result.mutable_metrics())["publish_s"] = timer.Seconds();
  return reply;
}

absl::StatusOr<WorkReply> PpoTrainerRole::Step(const proto::TrainStep& step,
                                               std::vector<TensorFrame> tensors) {
  if (!learner_) return absl::FailedPreconditionError("train_step before train_init");
  // behavior_version: the oldest version in the batch, at most rollout.max_staleness behind.
  const int64_t k = config_.rollout.max_staleness;
  const int64_t lag = learner_->version() - step.behavior_version();
  if (lag < 0 || lag > k) {
    return absl::FailedPreconditionError(absl::StrCat(
        "batch was collected by policy version ", step.behavior_version(),
        " but the trainer holds version ", learner_->version(),
        k == 0 ? " (synchronous PPO allows no lag)"
               : absl::StrCat(" (rollout.max_staleness allows a lag of 0 to ", k, ")")));
  }
  int64_t rows = -1;
  for (auto& t : tensors) {
    if (t.name() == "obs" && !t.shape().empty()) rows = t.shape()[0];
  }
  if (rows <= 0) return absl::InvalidArgumentError("batch has no obs rows");
  PpoBatch b;
  ASSIGN_OR_RETURN(b.obs, BatchTensor(tensors, "obs", proto::F32, rows));
  ASSIGN_OR_RETURN(
      b.actions, BatchTensor(tensors, "actions", spec_.discrete() ? proto::I64 : proto::F32, rows));
  ASSIGN_OR_RETURN(b.logprobs, BatchTensor(tensors, "logprobs", proto::F32, rows));
  ASSIGN_OR_RETURN(b.values, BatchTensor(tensors, "values", proto::F32, rows));
  ASSIGN_OR_RETURN(b.advantages, BatchTensor(tensors, "advantages", proto::F32, rows));
  ASSIGN_OR_RETURN(b.returns, BatchTensor(tensors, "returns", proto::F32, rows));
  const Stopwatch timer;
  std::map<std::string, double> metrics =
      learner_->Update(b, step.iteration(), step.num_iterations());
  const double update_s = timer.Seconds();
  ASSIGN_OR_RETURN(WorkReply reply, Publish());
  for (const auto& [k, v] : metrics) (*reply.result.mutable_metrics())[k] = v;
  (*reply.result.mutable_metrics())["update_s"] = update_s;
  return reply;
}

absl::StatusOr<WorkReply> PpoTrainerRole::SaveState(const proto::SaveState& save) {
  if (!learner_) return absl::FailedPreconditionError("save_state before train_init");
  std::error_code ec;
  std::filesystem::create_directories(save.dir(), ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", save.dir(), ": ", ec.message()));
  RETURN_IF_ERROR(learner_->SaveState(save.dir() + "/learner.pt"));
  return WorkReply();
}

absl::StatusOr<WorkReply> PpoTrainerRole::LoadState(const proto::LoadState& load) {
  if (!learner_) return absl::FailedPreconditionError("load_state before train_init");
  RETURN_IF_ERROR(learner_->LoadState(load.dir() + "/learner.pt"));
  return Publish();
}

}  // namespace rlforge
