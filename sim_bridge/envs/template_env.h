// Template for a new built-in C++ env — copy these two files, rename, register.
//
// PointMass-v0 is a complete, tested env kept deliberately small: a mass on a
// line, pushed by a bounded force, rewarded for resting at the origin.
//
// To add your own env:
//   1. Copy template_env.{h,cc} to my_env.{h,cc}; rename the class.
//   2. In the constructor fill spec_: id ("MyEnv-v0"), observation space (a Box
//      of float32), action space (Box or Discrete) and max_episode_steps (the
//      time limit; 0 for none). These are what clients see in the EnvSpec.
//   3. Reset(seed, obs): re-seed rng_ only when a seed is given (Gymnasium
//      semantics: later episodes continue the stream), draw the start state
//      from rng_, write the first observation.
//   4. Step(action, obs): `action` points at one int64 for Discrete spaces, at
//      action.flat_size() floats for Box; advance the state, write the next
//      observation, return the reward and whether the episode terminated
//      (a true end state, not a time limit: LocalVectorEnv truncates).
//   5. Add `{"MyEnv-v0", &Make<MyEnv>}` to kEnvs in sim_bridge/env.cc and the
//      .cc file to sim_bridge/CMakeLists.txt.
// Never return NaN or infinity: LocalVectorEnv stops the run with an error
// naming the env index when an observation or reward is not finite.
#pragma once

#include "sim_bridge/env.h"

namespace rlforge::sim {

class PointMassEnv final : public Env {
 public:
  PointMassEnv();
  const EnvSpec& spec() const override { return spec_; }
  void Reset(std::optional<uint64_t> seed, float* obs) override;
  StepOutcome Step(const void* action, float* obs) override;

  static constexpr double kDt = 0.1;
  static constexpr double kMaxForce = 1.0;
  static constexpr double kEdge = 5.0;  // leaving [-kEdge, kEdge] ends the episode

 private:
  EnvSpec spec_;
  EnvRng rng_;
  double x_ = 0, v_ = 0;
};

}  // namespace rlforge::sim
