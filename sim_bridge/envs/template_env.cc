#include "sim_bridge/envs/template_env.h"

#include <algorithm>
#include <cmath>

namespace rlforge::sim {

PointMassEnv::PointMassEnv() {
  spec_.id = "PointMass-v0";
  // Observation: position and velocity.
  spec_.observation = Space::Box({2}, {-kEdge, -10}, {kEdge, 10});
  // Action: one force, clipped to [-kMaxForce, kMaxForce].
  spec_.action = Space::Box({1}, {-kMaxForce}, {kMaxForce});
  spec_.max_episode_steps = 200;
}

void PointMassEnv::Reset(std::optional<uint64_t> seed, float* obs) {
  if (seed) rng_.Seed(*seed);
  x_ = rng_.Uniform(-2.0, 2.0);
  v_ = 0;
  obs[0] = static_cast<float>(x_);
  obs[1] = static_cast<float>(v_);
}

StepOutcome PointMassEnv::Step(const void* action, float* obs) {
  double force =
      std::clamp(static_cast<double>(*static_cast<const float*>(action)), -kMaxForce, kMaxForce);
  v_ = std::clamp(v_ + force * kDt, -10.0, 10.0);
  x_ = x_ + v_ * kDt;
  obs[0] = static_cast<float>(x_);
  obs[1] = static_cast<float>(v_);
  bool fell_off = std::fabs(x_) > kEdge;
  double reward = -(x_ * x_ + 0.1 * v_ * v_ + 0.01 * force * force);
  return {fell_off ? reward - 100.0 : reward, fell_off};
}

}  // namespace rlforge::sim
