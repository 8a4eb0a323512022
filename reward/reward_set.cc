#include "reward/reward_set.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "reward/code_reward.h"
#include "reward/math_answer.h"
#include "reward/plugin_reward.h"
#include "reward/python_reward.h"
#include "reward/verifiers.h"

namespace rlforge::reward {

namespace {

// What a reward's runner threads share with the waiting caller. Abandoned threads keep it
// (and the reward) alive through their shared_ptr.
struct RunState {
  std::shared_ptr<const Reward> reward;
  std::vector<Sample> batch;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<SampleScore>> results;
  int generation = 0;  // bumped when a thread is abandoned; stale threads stop
};

SampleScore Finite(SampleScore out) {
  if (out.ok() && !std::isfinite(out.value)) {
    return {0, ScoreStatus::kNotFinite, absl::StrCat("returned ", out.value)};
  }
  return out;
}

SampleScore Checked(const Reward& r, const Sample& s) {
  try {
    return Finite(r.ScoreOne(s));
  } catch (const std::exception& e) {
    return SampleScore::Error(absl::StrCat("threw: ", e.what()));
  } catch (...) {
    return SampleScore::Error("threw a non-standard exception");
  }
}

// A batched reward keeps its own per-sample limits (reward.h).
std::vector<SampleScore> CheckedBatch(const Reward& r, const std::vector<Sample>& batch) {
  std::vector<SampleScore> out;
  try {
    out = r.ScoreBatch(batch);
  } catch (const std::exception& e) {
    out.assign(batch.size(), SampleScore::Error(absl::StrCat("threw: ", e.what())));
  }
  if (out.size() != batch.size()) {
    out.assign(batch.size(), SampleScore::Error(absl::StrCat(
                                 "scored ", out.size(), " of a batch of ", batch.size())));
  }
  for (SampleScore& s : out) s = Finite(std::move(s));
  return out;
}

void Work(std::shared_ptr<RunState> st, int generation, size_t from) {
  for (size_t i = from; i < st->batch.size(); ++i) {
    SampleScore s = Checked(*st->reward, st->batch[i]);
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->generation != generation) return;  // abandoned: the caller moved on
    st->results[i] = std::move(s);
    st->cv.notify_all();
  }
}

}  // namespace

void RewardSet::Add(std::string name, double weight, double timeout_s,
                    std::shared_ptr<const Reward> reward) {
  entries_.push_back({std::move(name), weight, timeout_s, std::move(reward)});
}

std::vector<SampleScore> RewardSet::RunOne(const Entry& e, const std::vector<Sample>& batch) const {
  if (e.reward->Batched()) return CheckedBatch(*e.reward, batch);
  auto st = std::make_shared<RunState>();
  st->reward = e.reward;
  st->batch = batch;
  st->results.resize(batch.size());
  const auto limit = std::chrono::duration<double>(e.timeout_s);
  std::thread(Work, st, 0, 0).detach();
  int timeouts = 0;
  std::vector<SampleScore> out(batch.size());
  std::unique_lock<std::mutex> lock(st->mu);
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    if (st->cv.wait_until(lock, deadline, [&] { return st->results[i].has_value(); })) {
      out[i] = *st->results[i];
      continue;
    }
    out[i] = {0, ScoreStatus::kTimeout, absl::StrCat("timed out after ", e.timeout_s, " s")};
    ++st->generation;
    if (++timeouts >= kMaxTimeoutsPerBatch) {
      for (size_t k = i + 1; k < batch.size(); ++k) {
        out[k] = {0, ScoreStatus::kTimeout,
                  absl::StrCat("not scored: ", timeouts, " samples of this batch timed out")};
      }
      break;
    }
    if (i + 1 < batch.size()) std::thread(Work, st, st->generation, i + 1).detach();
  }
  return out;
}

BatchScores RewardSet::Score(const std::vector<Sample>& batch) const {
  BatchScores out;
  const size_t n = batch.size();
  out.rewards.resize(entries_.size());
  {
    std::vector<std::thread> runners;
    for (size_t r = 0; r < entries_.size(); ++r) {
      out.rewards[r].name = entries_[r].name;
      out.rewards[r].weight = entries_[r].weight;
      runners.emplace_back([&, r] { out.rewards[r].scores = RunOne(entries_[r], batch); });
    }
    for (auto& t : runners) t.join();
  }
  out.total.assign(n, 0.0);
  out.ok.assign(n, true);
  out.error.assign(n, "");
  for (size_t i = 0; i < n; ++i) {
    for (const auto& r : out.rewards) {
      const SampleScore& s = r.scores[i];
      if (s.ok()) {
        out.total[i] += r.weight * s.value;
        continue;
      }
      out.ok[i] = false;
      if (!out.error[i].empty()) out.error[i] += "; ";
      absl::StrAppend(&out.error[i], "reward '", r.name, "' on sample ", i, ": ",
                      ScoreStatusName(s.status), ": ", s.error);
    }
    if (!out.ok[i]) out.total[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return out;
}

std::map<std::string, double> BatchScores::Metrics() const {
  std::map<std::string, double> m;
  auto moments = [&](const std::string& prefix, auto&& value_at, auto&& ok_at, size_t n) {
    double sum = 0, sq = 0;
    int64_t count = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!ok_at(i)) continue;
      sum += value_at(i);
      sq += value_at(i) * value_at(i);
      ++count;
    }
    const double mean = count ? sum / count : std::numeric_limits<double>::quiet_NaN();
    m[prefix + "/mean"] = mean;
    m[prefix + "/std"] = count ? std::sqrt(std::max(0.0, sq / count - mean * mean))
                               : std::numeric_limits<double>::quiet_NaN();
    return count;
  };
  for (const auto& r : rewards) {
    const int64_t scored = moments(
        "reward/" + r.name, [&](size_t i) { return r.scores[i].value; },
        [&](size_t i) { return r.scores[i].ok(); }, r.scores.size());
    m["reward/" + r.name + "/errors"] = static_cast<double>(r.scores.size() - scored);
  }
  const int64_t ok_count = moments(
      "reward/total", [&](size_t i) { return total[i]; }, [&](size_t i) { return ok[i]; },
      total.size());
  m["reward/failed_samples"] = static_cast<double>(total.size() - ok_count);
  return m;
}

absl::StatusOr<std::shared_ptr<const Reward>> BuildReward(const RewardSpec& spec,
                                                          double timeout_s) {
  const RewardParams& p = spec.params;
  switch (spec.kind) {
    case RewardKind::kExactAnswer:
      return MakeExactAnswer(p.extract, p.case_sensitive);
    case RewardKind::kNumeric:
      return MakeNumeric(p.extract, p.abs_tol, p.rel_tol);
    case RewardKind::kMath:
      return MakeMath(p.extract);
    case RewardKind::kFormat:
      return MakeThinkFormat(p.tag, p.answer_form);
    case RewardKind::kRegexFormat: {
      auto r = MakeRegexFormat(p.pattern, p.full_match, timeout_s);
      if (!r.ok()) return Annotate(r.status(), "params.pattern");
      return std::shared_ptr<const Reward>(*std::move(r));
    }
    case RewardKind::kLengthPenalty:
      if (p.max_length < 1 || p.buffer < 0 || p.buffer > p.max_length) {
        return absl::InvalidArgumentError(
            absl::StrCat("params: need 1 <= max_length and 0 <= buffer <= max_length, got ",
                         p.max_length, " and ", p.buffer));
      }
      return MakeLengthPenalty(p.max_length, p.buffer, p.unit == LengthUnit::kTokens);
    case RewardKind::kPlugin: {
      auto r = LoadPluginReward(p.path, p.args);
      if (!r.ok()) return r.status();
      return std::shared_ptr<const Reward>(*std::move(r));
    }
    case RewardKind::kPython:
      return MakePythonReward({.path = PluginFile(p.path),
                               .function = p.function,
                               .python = p.interpreter,
                               .workers = static_cast<int>(p.processes),
                               .timeout_s = timeout_s});
    case RewardKind::kCode: {
      CodeRewardOptions o;
      o.interpreter = p.interpreter;
      o.limits.memory_bytes = p.memory_mb << 20;
      o.limits.cpu_s = static_cast<int>(p.cpu_s);
      o.limits.wall_s = p.test_timeout_s;
      o.limits.processes = static_cast<int>(p.max_processes);
      return std::shared_ptr<const Reward>(MakeCodeReward(std::move(o)));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("kind ", static_cast<int>(spec.kind), " is not a reward kind"));
}

std::vector<RewardSpecProblem> CheckRewardSpec(const RewardSpec& spec) {
  const RewardParams& p = spec.params;
  std::vector<RewardSpecProblem> out;
  if (spec.kind == RewardKind::kRegexFormat && !p.pattern.empty()) {
    // As written first (the message shows the user's pattern), then as built. The matcher's
    // time limit plays no part in compiling.
    auto r = MakeRegexFormat(p.pattern, /*full_match=*/false, /*time_limit_s=*/1);
    if (r.ok() && p.full_match) r = MakeRegexFormat(p.pattern, /*full_match=*/true, 1);
    if (!r.ok()) out.push_back({"params.pattern", std::string(r.status().message())});
  }
  if ((spec.kind == RewardKind::kPlugin || spec.kind == RewardKind::kPython) && !p.path.empty()) {
    const std::string file = PluginFile(p.path);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      out.push_back(
          {"params.path",
           absl::StrCat("no file '", p.path, "'",
                        std::filesystem::path(p.path).is_relative()
                            ? absl::StrCat(" (relative to the working directory: ", file, ")")
                            : "")});
    }
  }
  return out;
}

absl::StatusOr<RewardSet> RewardSet::Create(const RewardOptions& options) {
  if (options.rewards.empty()) {
    return absl::InvalidArgumentError("reward.rewards: no rewards configured");
  }
  RewardSet set;
  for (size_t i = 0; i < options.rewards.size(); ++i) {
    const RewardSpec& spec = options.rewards[i];
    const double timeout_s = spec.timeout_s > 0 ? spec.timeout_s : options.timeout_s;
    auto r = BuildReward(spec, timeout_s);
    if (!r.ok()) {
      return Annotate(r.status(), absl::StrCat("reward.rewards[", i, "] (", spec.name, ")"));
    }
    set.Add(spec.name, spec.weight, timeout_s, *std::move(r));
  }
  return set;
}

}  // namespace rlforge::reward
