#include "reward/reward_role.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
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

void SamplesToProto(const std::vector<Sample>& samples, proto::ScoreTask* out) {
  for (const Sample& s : samples) {
    auto* p = out->add_samples();
    p->set_prompt(s.prompt);
    p->set_response(s.response);
    p->set_answer(s.answer);
    p->set_response_tokens(s.response_tokens);
  }
}

absl::StatusOr<BatchScores> ScoresFromProto(const proto::ScoreResult& r, size_t n) {
  const auto sized = [n](int size) { return static_cast<size_t>(size) == n; };
  if (!sized(r.total_size()) || !sized(r.ok_size()) || !sized(r.error_size())) {
    return absl::InvalidArgumentError(absl::StrCat("ScoreResult: expected ", n,
                                                   " samples, got total ", r.total_size(), ", ok ",
                                                   r.ok_size(), ", error ", r.error_size()));
  }
  BatchScores out;
  out.total.assign(r.total().begin(), r.total().end());
  out.ok.assign(r.ok().begin(), r.ok().end());
  out.error.assign(r.error().begin(), r.error().end());
  for (const auto& rs : r.rewards()) {
    if (!sized(rs.values_size()) || !sized(rs.ok_size())) {
      return absl::InvalidArgumentError(absl::StrCat("ScoreResult: reward '", rs.name(), "' has ",
                                                     rs.values_size(), " values for ", n,
                                                     " samples"));
    }
    BatchScores::PerReward per;
    per.name = rs.name();
    per.weight = rs.weight();
    for (int i = 0; i < rs.values_size(); ++i) {
      per.scores.push_back(rs.ok(i) ? SampleScore::Ok(rs.values(i))
                                    : SampleScore{0, ScoreStatus::kError, out.error[i]});
    }
    out.rewards.push_back(std::move(per));
  }
  return out;
}

absl::StatusOr<WorkReply> RewardRole::Handle(const proto::WorkRequest& request,
                                             std::vector<TensorFrame> tensors) {
  if (request.task_case() != proto::WorkRequest::kScore) {
    return absl::InvalidArgumentError(
        "reward actor got a request that is not a score task (WorkRequest.score)");
  }
  const Stopwatch timer;
  const BatchScores scores = set_.Score(SamplesFromProto(request.score()));
  const double seconds = timer.Seconds();
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
