// Running statistics for normalisation, in plain C++ (the controller uses them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace rlforge {

// Mean and variance of a stream, merged batch by batch (Chan et al.).
class RunningMeanStd {
 public:
  void Update(const std::vector<double>& batch);
  double mean() const { return mean_; }
  double var() const { return var_; }
  double count() const { return count_; }
  // For checkpoints: the three moments, restored exactly.
  void Restore(double mean, double var, double count) {
    mean_ = mean;
    var_ = var;
    count_ = count;
  }

 private:
  double mean_ = 0, var_ = 1, count_ = 1e-4;
};

// Reward scaling by the running std of each env's discounted return, as
// Stable-Baselines3's VecNormalize(norm_reward=True): r / sqrt(var(G) + eps),
// clipped. Each env keeps its own running return across iterations.
class RewardScaler {
 public:
  RewardScaler(int64_t num_envs, double gamma, double clip);
  // rewards/dones: [T, N] row-major (N = num_envs). Scales in place; invalid
  // (autoreset) steps are skipped.
  void ScaleInPlace(int64_t T, float* rewards, const uint8_t* dones, const uint8_t* valid);
  // Every env's episode was cut (its envs were reset): running returns start again from 0;
  // the statistics are kept.
  void RestartEpisodes() { std::fill(returns_.begin(), returns_.end(), 0.0); }
  // For checkpoints: the discounted return of every env and the statistics over them.
  const std::vector<double>& returns() const { return returns_; }
  const RunningMeanStd& stats() const { return stats_; }
  void Restore(std::vector<double> returns, const RunningMeanStd& stats) {
    returns_ = std::move(returns);
    stats_ = stats;
  }

 private:
  double gamma_, clip_;
  std::vector<double> returns_;
  RunningMeanStd stats_;
};

}  // namespace rlforge
