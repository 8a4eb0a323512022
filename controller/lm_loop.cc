#include "controller/lm_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/role_names.h"
#include "common/status.h"
#include "common/timing_keys.h"
#include "controller/rollout_dispatcher.h"
#include "reward/answer_check.h"

namespace rlforge {

LmLoop::LmLoop(JobContext& ctx, const TaskText& text)
    : ctx_(ctx), text_(text), fleet_(ctx.controller().actors().IdsOfRole(kRolloutRole)) {
  for (const std::string& id : ctx.controller().actors().IdsOfRole(kRolloutRole)) {
    incarnation_.push_back(ctx.controller().actors().Find(id)->incarnation);
    unloaded_.push_back(false);
  }
}

SamplingParams SamplingParams::Greedy(int64_t max_tokens, uint64_t seed) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.seed = seed;
  return p;
}

absl::StatusOr<Scored> LmLoop::GenerateAndScore(const std::vector<PromptExample>& examples,
                                                const SamplingParams& p) {
  const Stopwatch t0;
  // Request ids are positions in `examples` whatever engine gets them: each group's seed
  // (RequestSeed) and place in the batch follow from them alone, so a group dealt again after
  // its engine was lost comes out the same.
  std::vector<int64_t> ids(examples.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  RolloutDispatcher round(*this, p, 0);
  RETURN_IF_ERROR(round.Dispatch(0, examples, ids));
  RETURN_IF_ERROR(round.ServeUntil([&] { return round.Complete(0); }));
  ASSIGN_OR_RETURN(Scored s, round.Take(0));
  s.timings["rollout_wall_s"] = t0.Seconds();
  AddRequeuedMetrics(s.metrics);
  return s;
}

void LmLoop::CountRequeued(int64_t groups, int64_t scores) {
  requeued_groups_ += groups;
  requeued_scores_ += scores;
}

void LmLoop::AddRequeuedMetrics(std::map<std::string, double>& metrics) const {
  if (requeued_groups_ > 0 || requeued_scores_ > 0) {  // totals, once it happened
    metrics["faults/requeued_groups"] = static_cast<double>(requeued_groups_);
    metrics["faults/requeued_scores"] = static_cast<double>(requeued_scores_);
  }
}

absl::Status LmLoop::Evaluate(int64_t max_tokens, uint64_t seed, AnswerCheck check,
                              IterationRecord& rec) {
  const Stopwatch t0;
  ASSIGN_OR_RETURN(Scored s,
                   GenerateAndScore(text_.heldout, SamplingParams::Greedy(max_tokens, seed)));
  const reward::AnswerJudge judge(check);
  int64_t correct = 0;
  for (size_t i = 0; i < s.groups.size(); ++i) {
    if (judge.Correct(text_.Response(s.groups[i].samples[0]), s.examples[i].answer)) ++correct;
  }
  const double count = static_cast<double>(s.groups.size());
  rec.metrics["heldout_accuracy"] = count > 0 ? static_cast<double>(correct) / count : 0;
  rec.metrics["heldout_examples"] = count;
  RewardStats(s, count, rec.metrics, "heldout_");
  rec.timings["eval_s"] = t0.Seconds();
  return absl::OkStatus();
}

absl::Status LmLoop::EvaluateStart(int64_t max_tokens, uint64_t seed, AnswerCheck check) {
  IterationRecord rec;
  rec.step = 0;
  RETURN_IF_ERROR(Evaluate(max_tokens, seed, check, rec));
  spdlog::info("start: held-out accuracy {:.3f}", rec.metrics["heldout_accuracy"]);
  return ctx_.EndIteration(rec);
}
std::vector<RoleRequirement> LmRoles(const JobConfig& c) {
  // Engines on the gloo path too: the loop names a new weight group when they change. Joins
  // and leaves in synchronous and asynchronous runs alike (RolloutDispatcher deals to both).
  return {{kTrainerRole, static_cast<int>(c.trainer.ranks), false},
          {kRolloutRole, static_cast<int>(c.rollout.workers), c.rollout.external, true, true,
           static_cast<int>(WorkerCap(c.rollout.workers, c.rollout.max_workers))},
          {kRewardRole, static_cast<int>(c.reward.workers), c.reward.external, true, true,
           static_cast<int>(WorkerCap(c.reward.workers, c.reward.max_workers))}};
}

void AddRewardSums(const std::map<std::string, std::vector<double>>& by_reward,
                   const std::vector<double>& totals, std::map<std::string, double>& metrics) {
  auto sums = [&](const std::string& name, const std::vector<double>& values) {
    double sum = 0, sq = 0;
    for (double v : values) {
      sum += v;
      sq += v * v;
    }
    metrics["reward/" + name + "/sum"] = sum;
    metrics["reward/" + name + "/sumsq"] = sq;
  };
  for (const auto& [name, values] : by_reward) sums(name, values);
  sums("total", totals);
}

void RewardStats(const Scored& s, double count, std::map<std::string, double>& metrics,
                 const std::string& prefix) {
  for (const auto& [k, v] : s.metrics) {
    if (!absl::EndsWith(k, "/sum")) continue;
    const std::string name = k.substr(0, k.size() - 4);
    const double mean = v / count;
    auto sq = s.metrics.find(name + "/sumsq");
    const double var =
        std::max(0.0, (sq == s.metrics.end() ? 0.0 : sq->second) / count - mean * mean);
    metrics[prefix + name + "/mean"] = mean;
    metrics[prefix + name + "/std"] = std::sqrt(var);
  }
}
}  // namespace rlforge
