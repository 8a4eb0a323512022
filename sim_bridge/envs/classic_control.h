// Gymnasium's classic-control envs, reproduced: CartPole-v1, Pendulum-v1,
// Acrobot-v1. Same constants, integrators, operation order, dtypes (including
// NumPy 2's float32 promotion rules), rewards, termination and time limits;
// checked against recorded Gymnasium trajectories (tools/make_gym_fixtures.py).
// Reset draws from our own generator (EnvRng), so a seed gives the same start
// on every run here, not the same start as NumPy's generator would.
#pragma once

#include <vector>

#include "sim_bridge/env.h"

namespace rlforge::sim {

// Envs whose full physical state can be read and set: for checking dynamics
// against reference trajectories step by step.
class StatefulEnv : public Env {
 public:
  virtual std::vector<double> GetState() const = 0;
  virtual void SetState(const std::vector<double>& state) = 0;
};

class CartPoleEnv final : public StatefulEnv {
 public:
  CartPoleEnv();
  const EnvSpec& spec() const override { return spec_; }
  void Reset(std::optional<uint64_t> seed, float* obs) override;
  StepOutcome Step(const void* action, float* obs) override;
  std::vector<double> GetState() const override { return {s_, s_ + 4}; }
  void SetState(const std::vector<double>& state) override;

 private:
  void Observe(float* obs) const;
  EnvSpec spec_;
  EnvRng rng_;
  double s_[4] = {0, 0, 0, 0};  // x, x_dot, theta, theta_dot
};

class PendulumEnv final : public StatefulEnv {
 public:
  PendulumEnv();
  const EnvSpec& spec() const override { return spec_; }
  void Reset(std::optional<uint64_t> seed, float* obs) override;
  StepOutcome Step(const void* action, float* obs) override;
  std::vector<double> GetState() const override { return {th_, thdot_}; }
  void SetState(const std::vector<double>& state) override;

 private:
  void Observe(float* obs) const;
  EnvSpec spec_;
  EnvRng rng_;
  double th_ = 0, thdot_ = 0;
};

class AcrobotEnv final : public StatefulEnv {
 public:
  AcrobotEnv();
  const EnvSpec& spec() const override { return spec_; }
  void Reset(std::optional<uint64_t> seed, float* obs) override;
  StepOutcome Step(const void* action, float* obs) override;
  std::vector<double> GetState() const override { return {s_, s_ + 4}; }
  void SetState(const std::vector<double>& state) override;

 private:
  void Observe(float* obs) const;
  EnvSpec spec_;
  EnvRng rng_;
  double s_[4] = {0, 0, 0, 0};  // theta1, theta2, dtheta1, dtheta2
};

}  // namespace rlforge::sim
