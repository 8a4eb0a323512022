// TrainerGroup: the job's trainer ranks, driven as one learner.
//
// algorithm -> Submit(request, frames) -> the same request and frames to every trainer rank,
//   in rank order -> Await() -> every rank's result -> rank 0's outcome
//
// The ranks shard the model and run collectives together, so every trainer request goes to
// every rank: no request is for the leader alone. Rank 0 leads: its reply carries the new
// weights and the metrics, and is the outcome returned. A failure on any rank fails Await as
// soon as it arrives, naming that rank's actor (its peers would only time out in their next
// collective). One request is in flight at a time. Not thread-safe: the algorithm's loop owns
// it; the controller must outlive it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/controller.h"

namespace rlforge {

class TrainerGroup {
 public:
  // The trainer actors registered with `controller`, by rank. Fails when the job has none.
  static absl::StatusOr<TrainerGroup> Create(Controller& controller);

  // Sends `request` with `tensors` to every rank (rank 0 gets `tensors`, the others copies).
  // Fails when a request is already in flight or a rank cannot be reached.
  absl::Status Submit(proto::WorkRequest request, std::vector<TensorFrame> tensors = {});
  // Serves until every rank answered the request in flight; returns rank 0's outcome.
  absl::StatusOr<WorkOutcome> Await();
  // Await, together with `others` (work submitted to other actors that runs alongside, e.g.
  // engines loading the weights the ranks stream): rank 0's outcome and the others', in order.
  absl::StatusOr<std::pair<WorkOutcome, std::vector<WorkOutcome>>> AwaitWith(
      const std::vector<uint64_t>& others);
  // Submit, then Await.
  absl::StatusOr<WorkOutcome> Run(proto::WorkRequest request,
                                  std::vector<TensorFrame> tensors = {});

  // Whole-job checkpoints: every rank writes its state (its shards) into
  // <state_dir>/trainer; LoadState reads it back and returns rank 0's outcome (a
  // language-model trainer's carries the restored version's WeightsReady).
  absl::Status SaveState(const std::string& state_dir);
  absl::StatusOr<WorkOutcome> LoadState(const std::string& state_dir);

  // The work ids of the request in flight, by rank (empty when none): to wait on alongside
  // other work with Controller::AwaitReady, then Await.
  const std::vector<uint64_t>& in_flight() const { return in_flight_; }

  // Actor ids by rank; the first is the leader.
  const std::vector<std::string>& ids() const { return ids_; }

 private:
  TrainerGroup(Controller* controller, std::vector<std::string> ids)
      : controller_(controller), ids_(std::move(ids)) {}

  Controller* controller_;
  std::vector<std::string> ids_;
  std::vector<uint64_t> in_flight_;  // work ids by rank
};

}  // namespace rlforge
