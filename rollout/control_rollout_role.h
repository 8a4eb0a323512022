// The rollout worker for control policies: steps its envs with the current
// policy and returns whole trajectories tagged with the policy version.
//
// RolloutSetup -> envs (in-process, or sim_bridge servers) + seeded reset -> PolicySpec
// LoadWeights  -> PolicyReader (the bucket stream: the shared-memory segment, or the
//                 inline frame) -> ActorCritic (version v)
// RolloutTask  -> T x [policy forward (batched over envs) -> sample -> env step]
//              -> obs, actions, logprobs, values, rewards, terminated,
//                 truncated, valid [T, N, ...], last_values [N], episodes
//
// The env state carries over between tasks (episodes span iterations).
// SaveState -> dir/rollout.pt: the sampler's generator, the observations and the log of every
// action sent to the envs since setup. LoadState (after RolloutSetup's seeded reset) replays
// that log, which brings any deterministic simulator (built-in, server or external) back to
// the saved state, checked against the saved observations.
#pragma once

#include <memory>
#include <random>

#include "actors/role.h"
#include "models/actor_critic.h"
#include "sim_bridge/vector_env.h"
#include "weights/policy_plane.h"
#include "zmq.hpp"

namespace rlforge {

class ControlRolloutRole final : public Role {
 public:
  ControlRolloutRole(const JobConfig& config, const proto::Assignment& assignment);
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return version_; }

 private:
  absl::StatusOr<WorkReply> Setup(const proto::RolloutSetup& setup);
  absl::StatusOr<WorkReply> Load(const proto::LoadWeights& load, std::vector<TensorFrame>& tensors);
  absl::StatusOr<WorkReply> Rollout(const proto::RolloutTask& task);
  // One Rollout call's buffers and the actions in flight (control_rollout_role.cc).
  struct Pass;
  // Step t of env group g: the policy acts (and, pipelined, the group starts stepping).
  absl::Status Act(Pass& p, int64_t t, int g);
  // Step t of env group g ends: its rewards, flags, episodes and next observations.
  absl::Status Observe(Pass& p, int64_t t, int g);
  absl::StatusOr<WorkReply> SaveState(const proto::SaveState& save);
  absl::StatusOr<WorkReply> LoadState(const proto::LoadState& load);
  // Bytes of one env's action as the envs take it (int64, or action_size floats).
  int64_t EnvActionBytes() const;
  // Whether this rollout steps the servers group by group (sim.pipeline).
  bool Pipelined() const;
  // Counts a rollout of `steps` steps that took `seconds`; sim.pipeline auto
  // keeps the 2nd's and 3rd's time.
  void TimePipeline(int64_t steps, double seconds);
  // Samples one action per env from the policy output; writes actions for
  // the env (clipped to the Box) and for the learner (unclipped).
  void Sample(const ActorCriticImpl::Output& out, std::vector<int64_t>* discrete,
              std::vector<float>* learner_actions, std::vector<float>* env_actions);

  JobConfig config_;
  proto::Assignment assignment_;
  zmq::context_t zmq_;
  std::unique_ptr<sim::VectorEnv> envs_;
  proto::PolicySpec spec_;
  int64_t first_env_index_ = 0;
  std::vector<float> obs_;  // current observation of every env
  ActorCritic model_{nullptr};
  int64_t version_ = -1;
  // sim.pipeline auto: rollouts done, and seconds per step of the timed
  // pipelined and one-batch rollouts (0: not timed yet).
  int64_t rollouts_ = 0;
  double pipelined_step_s_ = 0, batch_step_s_ = 0;
  std::unique_ptr<PolicyReader> reader_;  // made with the model, at the first load
  std::vector<float> flat_;
  std::mt19937_64 rng_;
  // Every action batch stepped since setup, in order: what LoadState replays.
  std::vector<uint8_t> action_log_;
};

}  // namespace rlforge
