// PpoAlgorithm: synchronous PPO for control policies in simulators.
//
// sim servers (optional) -> RolloutSetup (envs, seeds) -> TrainInit (v0) ->
// LoadWeights -> per iteration:
//   rollout workers: T steps each -> trajectories tagged with their version
//   controller: reward scaling (optional), GAE, batch of valid samples
//   trainer: PPO update -> version v+1 -> weight sync (shm or ZeroMQ)
//   metrics: episodic_return over the last ppo.return_window episodes, losses,
//            per-stage timings, policy version and lag
#pragma once

#include <deque>

#include "common/cpu_affinity.h"
#include "controller/algorithm.h"
#include "trainer/running_stats.h"

namespace rlforge {

class PpoAlgorithm final : public Algorithm {
 public:
  explicit PpoAlgorithm(const JobConfig& config) : config_(config) {}
  std::vector<RoleRequirement> Roles() const override;
  absl::Status Run(JobContext& ctx) override;

 private:
  // Per rollout worker: sim servers as (name, endpoint).
  absl::StatusOr<std::vector<std::vector<std::pair<std::string, std::string>>>> StartSimServers(
      JobContext& ctx);
  // sim.cpu_affinity: where workers and the servers StartSimServers starts run.
  SimPlacement PlanPlacement() const;
  absl::Status Broadcast(Controller& c, const proto::WeightsReady& w,
                         const std::vector<TensorFrame>& inline_weights);

  JobConfig config_;
  SimPlacement placement_;
  std::vector<std::string> workers_;
  std::vector<RewardScaler> reward_scalers_;
  std::deque<double> recent_returns_, recent_lengths_;
};

}  // namespace rlforge
