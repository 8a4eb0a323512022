// Controller's work dispatch: Submit hands an actor a work item, the Await family waits for
// results while the controller keeps serving every actor (controller.h).
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "controller/controller.h"

namespace rlforge {

absl::StatusOr<uint64_t> Controller::Submit(const std::string& actor_id, proto::WorkRequest request,
                                            std::vector<TensorFrame> tensors) {
  ActorInfo* a = registry_.Find(actor_id);
  if (a == nullptr) return absl::NotFoundError(absl::StrCat("no actor ", actor_id));
  if (a->state != ActorState::kReady && a->state != ActorState::kBusy) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor ", actor_id, " is ", ActorStateName(a->state)));
  }
  uint64_t id = next_work_id_++;
  request.set_work_id(id);
  Message m = NewMessage();
  *m.envelope.mutable_work_request() = std::move(request);
  m.tensors = std::move(tensors);
  absl::Status s = transport_->Send(a->work_peer, std::move(m));
  Pending p;
  p.actor_id = actor_id;
  p.submitted_us = clock_->NowMicros();
  pending_[id] = std::move(p);
  if (!s.ok()) {
    absl::Status lost = Lose(*a, absl::StrCat("cannot be reached (", s.message(), ")"));
    if (!lost.ok()) pending_.erase(id);
    RETURN_IF_ERROR(lost);
    return id;  // Recover gave it back lost
  }
  a->state = ActorState::kBusy;
  return id;
}

absl::StatusOr<std::vector<WorkOutcome>> Controller::AwaitAll(
    const std::vector<uint64_t>& work_ids) {
  for (uint64_t id : work_ids) {
    if (!pending_.count(id)) return absl::NotFoundError(absl::StrCat("unknown work id ", id));
  }
  while (true) {
    bool all = true;
    for (uint64_t id : work_ids) {
      const Pending& p = pending_.at(id);
      if (p.done && !p.outcome.result.ok()) {
        absl::Status failed = absl::AbortedError(absl::StrCat(
            "work ", id, " failed on ", p.outcome.actor_id, ": ", p.outcome.result.error()));
        if (work_ids.size() > 1) failed = CauseOf(failed);
        for (uint64_t given_up : work_ids) pending_.erase(given_up);
        return failed;
      }
      all = all && p.done;
    }
    if (all) break;
    RETURN_IF_ERROR(Pump(options_.poll_ms));
  }
  std::vector<WorkOutcome> out;
  out.reserve(work_ids.size());
  for (uint64_t id : work_ids) out.push_back(std::move(pending_.extract(id).mapped().outcome));
  return out;
}

absl::Status Controller::CauseOf(const absl::Status& failed) {
  // Ranks that work together fail together: when one dies, its peers' collectives fail at
  // once (connection reset), often before its exit is reaped. Serve up to a second more so
  // the job names the rank that died, not the first peer that noticed.
  const int64_t until = clock_->NowMicros() + 1'000'000;
  for (int polls = 1000 / std::max(1, options_.poll_ms) + 1;
       polls > 0 && clock_->NowMicros() < until; --polls) {
    absl::Status lost = Pump(options_.poll_ms);
    if (!lost.ok()) {
      return absl::Status(lost.code(), absl::StrCat(lost.message(), "\n  then ", failed.message()));
    }
  }
  return failed;
}

absl::StatusOr<std::pair<size_t, WorkOutcome>> Controller::AwaitAny(
    const std::vector<uint64_t>& work_ids) {
  return AwaitFirst(work_ids, /*give_back_lost=*/false);
}

absl::StatusOr<std::pair<size_t, WorkOutcome>> Controller::AwaitNext(
    const std::vector<uint64_t>& work_ids) {
  return AwaitFirst(work_ids, /*give_back_lost=*/true);
}

absl::StatusOr<std::vector<WorkOutcome>> Controller::AwaitEach(
    const std::vector<uint64_t>& work_ids) {
  std::vector<WorkOutcome> out(work_ids.size());
  std::vector<uint64_t> waiting = work_ids;
  std::vector<size_t> index(work_ids.size());
  std::iota(index.begin(), index.end(), size_t{0});
  while (!waiting.empty()) {
    ASSIGN_OR_RETURN(auto next, AwaitNext(waiting));
    out[index[next.first]] = std::move(next.second);
    waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(next.first));
    index.erase(index.begin() + static_cast<std::ptrdiff_t>(next.first));
  }
  return out;
}

absl::StatusOr<std::pair<size_t, WorkOutcome>> Controller::AwaitFirst(
    const std::vector<uint64_t>& work_ids, bool give_back_lost) {
  if (work_ids.empty()) return absl::InvalidArgumentError("AwaitAny of no work");
  for (uint64_t id : work_ids) {
    if (!pending_.count(id)) return absl::NotFoundError(absl::StrCat("unknown work id ", id));
  }
  while (true) {
    for (size_t k = 0; k < work_ids.size(); ++k) {
      const Pending& p = pending_.at(work_ids[k]);
      if (!p.done) continue;
      if (!p.outcome.result.ok() && !(give_back_lost && p.outcome.lost)) {
        absl::Status failed =
            absl::AbortedError(absl::StrCat("work ", work_ids[k], " failed on ", p.outcome.actor_id,
                                            ": ", p.outcome.result.error()));
        if (work_ids.size() > 1) failed = CauseOf(failed);
        for (uint64_t given_up : work_ids) pending_.erase(given_up);
        return failed;
      }
      return std::make_pair(k, std::move(pending_.extract(work_ids[k]).mapped().outcome));
    }
    RETURN_IF_ERROR(Pump(options_.poll_ms));
  }
}

absl::StatusOr<size_t> Controller::AwaitReady(const std::vector<uint64_t>& work_ids) {
  if (work_ids.empty()) return absl::InvalidArgumentError("AwaitReady of no work");
  for (uint64_t id : work_ids) {
    if (!pending_.count(id)) return absl::NotFoundError(absl::StrCat("unknown work id ", id));
  }
  while (true) {
    for (size_t k = 0; k < work_ids.size(); ++k) {
      if (pending_.at(work_ids[k]).done) return k;
    }
    RETURN_IF_ERROR(Pump(options_.poll_ms));
  }
}

absl::StatusOr<WorkOutcome> Controller::Await(uint64_t work_id) {
  ASSIGN_OR_RETURN(auto all, AwaitAll({work_id}));
  return std::move(all[0]);
}

}  // namespace rlforge
