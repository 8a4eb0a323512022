#include "reward/reward_role.h"

#include <chrono>

#include "common/logging.h"

namespace rlforge::reward {

namespace {
constexpr int kLoggedErrorsPerBatch = 5;
}

absl::StatusOr<std::unique_ptr<Role>> RewardRole::Create(const JobConfig& config,
                                                         const proto::Assignment& assignment) {
  auto set = RewardSet::Create(config.reward);
  if (!set.ok()) return set.status();
  return std::unique_ptr<Role>(new RewardRole(*std::move(set), assignment.actor_id()));
}

std::vector<Sample> SamplesFromProto(const proto::ScoreTask& task) {
  std::vector<Sample> out;
  out.reserve(task.samples_size());
  for (const auto& s : task.samples()) {
    out.push_back({s.prompt(), s.response(), s.answer(), s.response_tokens()});
  }
  return out;
}

void ScoresToProto(const BatchScores& scores, proto::ScoreResult* out) {
  for (size_t i = 0; i < scores.total.size(); ++i) {
    out->add_total(scores.total[i]);
    out->add_ok(scores.ok[i]);
    out->add_error(scores.error[i]);
  }
  for (const auto& r : scores.rewards) {
    auto* rs = out->add_rewards();
    rs->set_name(r.name);
    rs->set_weight(r.weight);
    for (const auto& s : r.scores) {
      rs->add_values(s.ok() ? s.value : std::numeric_limits<double>::quiet_NaN());
      rs->add_ok(s.ok());
    }
  }
}

absl::StatusOr<WorkReply> RewardRole::Handle(const proto::WorkRequest& request,
                                             std::vector<TensorFrame> tensors) {
  if (request.task_case() != proto::WorkRequest::kScore) {
    return absl::InvalidArgumentError(
        "reward actor got a request that is not a score task (WorkRequest.score)");
  }
  const auto start = std::chrono::steady_clock::now();
  const BatchScores scores = set_.Score(SamplesFromProto(request.score()));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WorkReply reply;
  ScoresToProto(scores, reply.result.mutable_score());
  auto& metrics = *reply.result.mutable_metrics();
  for (const auto& [k, v] : scores.Metrics()) metrics[k] = v;
  metrics["reward/time_s"] = seconds;
  int logged = 0;
  for (size_t i = 0; i < scores.ok.size(); ++i) {
    if (scores.ok[i]) continue;
    if (logged++ < kLoggedErrorsPerBatch) {
      spdlog::warn("{}: work {}: {}", actor_id_, request.work_id(), scores.error[i]);
    }
  }
  if (logged > kLoggedErrorsPerBatch) {
    spdlog::warn("{}: work {}: {} more failed samples", actor_id_, request.work_id(),
                 logged - kLoggedErrorsPerBatch);
  }
  return reply;
}

}  // namespace rlforge::reward
