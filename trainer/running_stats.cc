#include "trainer/running_stats.h"

#include <algorithm>
#include <cmath>

namespace rlforge {

void RunningMeanStd::Update(const std::vector<double>& batch) {
  if (batch.empty()) return;
  double n = static_cast<double>(batch.size());
  double bm = 0;
  for (double x : batch) bm += x;
  bm /= n;
  double bv = 0;
  for (double x : batch) bv += (x - bm) * (x - bm);
  bv /= n;
  double total = count_ + n;
  double delta = bm - mean_;
  double m2 = var_ * count_ + bv * n + delta * delta * count_ * n / total;
  mean_ += delta * n / total;
  var_ = m2 / total;
  count_ = total;
}

RewardScaler::RewardScaler(int64_t num_envs, double gamma, double clip)
    : gamma_(gamma), clip_(clip), returns_(static_cast<size_t>(num_envs), 0.0) {}

void RewardScaler::ScaleInPlace(int64_t T, float* rewards, const uint8_t* dones,
                                const uint8_t* valid) {
  const int64_t N = static_cast<int64_t>(returns_.size());
  // Statistics first (over this batch's returns), then scale, as VecNormalize does per step.
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> step_returns;
    for (int64_t n = 0; n < N; ++n) {
      int64_t i = t * N + n;
      if (!valid[i]) continue;
      returns_[n] = returns_[n] * gamma_ + rewards[i];
      step_returns.push_back(returns_[n]);
    }
    stats_.Update(step_returns);
    double scale = 1.0 / std::sqrt(stats_.var() + 1e-8);
    for (int64_t n = 0; n < N; ++n) {
      int64_t i = t * N + n;
      if (!valid[i]) continue;
      rewards[i] = static_cast<float>(std::clamp(rewards[i] * scale, -clip_, clip_));
      if (dones[i]) returns_[n] = 0;
    }
  }
}

}  // namespace rlforge
