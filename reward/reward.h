// Reward: scores one finished response. The built-in verifiers (verifiers.h) and user plugins
// (plugin_reward.h) implement it; RewardSet (reward_set.h) runs several with weights and time
// limits and turns every failure into a per-sample error.
//
// sample {prompt, response, answer} -> Reward::ScoreOne -> SampleScore {value | error}
//
// ScoreOne may be called from several threads at once (RewardSet abandons a call that runs
// past its timeout and carries on in a new thread), so implementations keep no mutable state
// or guard it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlforge::reward {

struct Sample {
  std::string prompt;
  std::string response;
  std::string answer;            // the reference
  int64_t response_tokens = -1;  // -1: unknown
};

enum class ScoreStatus {
  kOk,
  kError,      // the reward reported a failure (or threw)
  kNotFinite,  // it returned NaN or +-inf
  kTimeout,    // it ran past its per-sample time limit
};
const char* ScoreStatusName(ScoreStatus s);

struct SampleScore {
  double value = 0;
  ScoreStatus status = ScoreStatus::kOk;
  std::string error;  // why, when status != kOk
  bool ok() const { return status == ScoreStatus::kOk; }
  static SampleScore Ok(double v) { return {v, ScoreStatus::kOk, {}}; }
  static SampleScore Error(std::string why) { return {0, ScoreStatus::kError, std::move(why)}; }
};

class Reward {
 public:
  virtual ~Reward() = default;
  // A failure is returned as SampleScore::Error, never as a 0 score.
  virtual SampleScore ScoreOne(const Sample& sample) const = 0;

  // Rewards that score a batch's samples in parallel and keep each sample's time limit
  // themselves (the python reward's process pool) say so; RewardSet then calls ScoreBatch once
  // per batch instead of ScoreOne per sample under its own deadline.
  virtual bool Batched() const { return false; }
  virtual std::vector<SampleScore> ScoreBatch(const std::vector<Sample>& batch) const {
    std::vector<SampleScore> out;
    for (const Sample& s : batch) out.push_back(ScoreOne(s));
    return out;
  }
};

}  // namespace rlforge::reward
