#include "controller/trainer_group.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge {

namespace {

std::vector<TensorFrame> CopyFrames(const std::vector<TensorFrame>& frames) {
  std::vector<TensorFrame> out;
  out.reserve(frames.size());
  for (const TensorFrame& t : frames) {
    out.push_back(TensorFrame::Copy(t.name(), t.dtype(), t.shape(), t.data()));
  }
  return out;
}

}  // namespace

absl::StatusOr<TrainerGroup> TrainerGroup::Create(Controller& controller) {
  std::vector<std::string> ids = controller.actors().IdsOfRole(kTrainerRole);
  if (ids.empty()) return absl::FailedPreconditionError("the job has no trainer actor");
  return TrainerGroup(&controller, std::move(ids));
}

absl::Status TrainerGroup::Submit(proto::WorkRequest request, std::vector<TensorFrame> tensors) {
  if (!in_flight_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the trainer ranks are still working on work ", in_flight_.front(),
                     "; await it before submitting another request"));
  }
  // Copies first: rank 0 then takes the originals.
  std::vector<std::vector<TensorFrame>> per_rank(ids_.size());
  for (size_t r = 1; r < ids_.size(); ++r) per_rank[r] = CopyFrames(tensors);
  per_rank[0] = std::move(tensors);
  for (size_t r = 0; r < ids_.size(); ++r) {
    absl::StatusOr<uint64_t> id = controller_->Submit(ids_[r], request, std::move(per_rank[r]));
    if (!id.ok()) {
      in_flight_.clear();
      return id.status();
    }
    in_flight_.push_back(*id);
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkOutcome> TrainerGroup::Await() {
  if (in_flight_.empty()) {
    return absl::FailedPreconditionError("no trainer request in flight to await");
  }
  const std::vector<uint64_t> ids = std::move(in_flight_);
  in_flight_.clear();
  ASSIGN_OR_RETURN(std::vector<WorkOutcome> outcomes, controller_->AwaitAll(ids));
  return std::move(outcomes.front());
}

absl::StatusOr<std::pair<WorkOutcome, std::vector<WorkOutcome>>> TrainerGroup::AwaitWith(
    const std::vector<uint64_t>& others) {
  if (in_flight_.empty()) {
    return absl::FailedPreconditionError("no trainer request in flight to await");
  }
  std::vector<uint64_t> ids = std::move(in_flight_);
  in_flight_.clear();
  const size_t ranks = ids.size();
  ids.insert(ids.end(), others.begin(), others.end());
  // The others may be lost (an engine lost mid-stream: the shm ring goes on without it); the
  // ranks' role is not recoverable, so a lost rank has stopped the job already.
  ASSIGN_OR_RETURN(std::vector<WorkOutcome> outcomes, controller_->AwaitEach(ids));
  for (size_t r = 0; r < ranks; ++r) {
    if (outcomes[r].lost) {
      return absl::UnavailableError(absl::StrCat("trainer rank ", r, " (", ids_[r], ") was lost"));
    }
  }
  std::vector<WorkOutcome> rest(std::make_move_iterator(outcomes.begin() + ranks),
                                std::make_move_iterator(outcomes.end()));
  return std::make_pair(std::move(outcomes.front()), std::move(rest));
}

absl::StatusOr<WorkOutcome> TrainerGroup::Run(proto::WorkRequest request,
                                              std::vector<TensorFrame> tensors) {
  RETURN_IF_ERROR(Submit(std::move(request), std::move(tensors)));
  return Await();
}

absl::Status TrainerGroup::SaveState(const std::string& state_dir) {
  proto::WorkRequest save;
  save.mutable_save_state()->set_dir(state_dir + "/trainer");
  return Run(std::move(save)).status();
}

absl::StatusOr<WorkOutcome> TrainerGroup::LoadState(const std::string& state_dir) {
  proto::WorkRequest load;
  load.mutable_load_state()->set_dir(state_dir + "/trainer");
  return Run(std::move(load));
}

}  // namespace rlforge
