// Job-file sections for control policies trained in simulators (PPO):
// env, sim, rollout, policy, ppo, weights. Schemas in control_config.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/choices.h"
#include "config/weight_transport.h"

namespace rlforge {

struct EnvOptions {
  std::string id = "CartPole-v1";
  int64_t num_envs = 8;  // per rollout worker
  int64_t max_episode_steps = 0;
};

struct SimOptions {
  SimBackend backend = SimBackend::kInprocess;
  int64_t servers_per_worker = 1;
  std::vector<std::string> command;    // server command template; empty: rlforge sim-server
  std::vector<std::string> addresses;  // backend external: running servers
  double step_timeout_s = 30;
  double start_timeout_s = 60;
  SimTransport transport = SimTransport::kAuto;   // backend server
  SimPipeline pipeline = SimPipeline::kAuto;      // step servers one by one, overlapping the policy
  CpuAffinity cpu_affinity = CpuAffinity::kAuto;  // backend server
};

struct RolloutOptions {
  int64_t workers = 1;
  bool external = false;
  // Language-model jobs: engines in all, counting those that join a running job (0: workers);
  // and the fewest live ones a round starts with (below it the job waits).
  int64_t max_workers = 0;
  int64_t min_workers = 1;
  int64_t steps_per_iteration = 128;  // per env
  // Language-model RL: how many policy versions a trained token may lag (0: synchronous).
  int64_t max_staleness = 0;
  // Partial rollouts (max_staleness >= 1): a weight load does not wait for the engine's
  // in-flight groups; they continue under the new weights, their KV recomputed.
  bool partial = false;
};

struct PolicyOptions {
  std::vector<int64_t> hidden_sizes = {64, 64};
  Activation activation = Activation::kTanh;
  double log_std_init = 0.0;
  bool ortho_init = true;
};

struct PpoOptions {
  int64_t total_steps = 200000;
  double gamma = 0.99;
  double gae_lambda = 0.95;
  double clip_coef = 0.2;
  bool anneal_clip = false;
  double clip_value = 0.0;
  double vf_coef = 0.5;
  double ent_coef = 0.0;
  int64_t epochs = 10;
  int64_t minibatches = 4;
  bool normalize_advantages = true;
  bool normalize_obs = false;
  bool normalize_reward = false;
  double clip_obs = 10.0;
  double clip_reward = 10.0;
  double target_kl = 0.0;
  bool fused_update = true;  // autograd-free loss and gradient (trainer/fast_ppo_grad.h)
  int64_t return_window = 20;
  bool stop_when_solved = false;
  double solved_return = 0.0;
};

struct WeightsOptions {
  WeightTransport transport = WeightTransport::kAuto;
  // The bucketed stream (weights/bucket_stream.h).
  double bucket_mb = 256;
  FloatDtype dtype = FloatDtype::kFloat32;    // on the wire
  WeightApply apply = WeightApply::kInPlace;  // the engine's side
  double timeout_s = 120;          // longest wait for one bucket, either side
};

}  // namespace rlforge
