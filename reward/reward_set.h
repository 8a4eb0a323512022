// RewardSet: every configured reward over a batch, with weights, per-sample time limits and
// per-sample status.
//
// batch -> one runner thread per reward -> ScoreOne per sample under a deadline
//       -> NaN / error / timeout checks -> weighted total per sample + per-reward scores
//
// A sample is ok only when every reward scored it; otherwise its total is NaN and `error`
// names the reward, the sample and the cause. A call that runs past its deadline is abandoned
// (its thread keeps the reward alive until it returns) and scoring carries on with the next
// sample in a fresh thread; after kMaxTimeoutsPerBatch timeouts the rest of that reward's
// batch is marked failed rather than waited for. Score() may be called from one thread at a
// time per RewardSet; rewards themselves must be thread-safe (reward.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/reward_options.h"
#include "reward/reward.h"

namespace rlforge::reward {

inline constexpr int kMaxTimeoutsPerBatch = 3;

struct BatchScores {
  struct PerReward {
    std::string name;
    double weight = 0;
    std::vector<SampleScore> scores;  // one per sample
  };
  std::vector<double> total;  // sum of weight x score; NaN where !ok
  std::vector<bool> ok;
  std::vector<std::string> error;  // "" where ok
  std::vector<PerReward> rewards;

  // reward/<name>/mean, reward/<name>/std (over the samples that reward scored),
  // reward/<name>/errors, reward/total/mean, reward/total/std (over ok samples) and
  // reward/failed_samples.
  std::map<std::string, double> Metrics() const;
};

class RewardSet {
 public:
  // Builds every reward of `options.rewards`; errors name reward.rewards[i] and its name.
  static absl::StatusOr<RewardSet> Create(const RewardOptions& options);

  // `timeout_s` > 0.
  void Add(std::string name, double weight, double timeout_s, std::shared_ptr<const Reward> reward);
  BatchScores Score(const std::vector<Sample>& batch) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    double weight;
    double timeout_s;
    std::shared_ptr<const Reward> reward;
  };
  std::vector<SampleScore> RunOne(const Entry& e, const std::vector<Sample>& batch) const;
  std::vector<Entry> entries_;
};

// Builds one reward from its spec (RewardSet adds weight and timeout; `timeout_s` also bounds
// the regex matcher of regex_format).
absl::StatusOr<std::shared_ptr<const Reward>> BuildReward(const RewardSpec& spec, double timeout_s);

// What BuildReward would refuse in `spec` that can be known without running the reward's code:
// a pattern that does not compile, a plugin path that names no file (PluginFile). A plugin is
// not loaded here: its code runs in reward workers only, whose set-up reports what else fails.
struct RewardSpecProblem {
  std::string key;  // below the reward: "params.pattern"
  std::string message;
};
std::vector<RewardSpecProblem> CheckRewardSpec(const RewardSpec& spec);

}  // namespace rlforge::reward
