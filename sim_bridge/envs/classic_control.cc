#include "sim_bridge/envs/classic_control.h"

#include <cmath>
#include <limits>

namespace rlforge::sim {

namespace {
constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

// ---------------------------------------------------------------- CartPole-v1

namespace cartpole {
constexpr double kGravity = 9.8, kMassCart = 1.0, kMassPole = 0.1;
constexpr double kTotalMass = kMassPole + kMassCart;
constexpr double kLength = 0.5;  // half the pole's length
constexpr double kPoleMassLength = kMassPole * kLength;
constexpr double kForceMag = 10.0, kTau = 0.02;
constexpr double kThetaThreshold = 12 * 2 * kPi / 360;
constexpr double kXThreshold = 2.4;
}  // namespace cartpole

CartPoleEnv::CartPoleEnv() {
  using namespace cartpole;
  // Bounds as Gymnasium declares them (float32 values).
  double hx = static_cast<float>(kXThreshold * 2);
  double ht = static_cast<float>(kThetaThreshold * 2);
  spec_.id = "CartPole-v1";
  spec_.observation = Space::Box({4}, {-hx, -kInf, -ht, -kInf}, {hx, kInf, ht, kInf});
  spec_.action = Space::Discrete(2);
  spec_.max_episode_steps = 500;
}

void CartPoleEnv::Reset(std::optional<uint64_t> seed, float* obs) {
  if (seed) rng_.Seed(*seed);
  for (double& v : s_) v = rng_.Uniform(-0.05, 0.05);
  Observe(obs);
}

void CartPoleEnv::SetState(const std::vector<double>& state) {
  for (int i = 0; i < 4; ++i) s_[i] = state[i];
}

void CartPoleEnv::Observe(float* obs) const {
  for (int i = 0; i < 4; ++i) obs[i] = static_cast<float>(s_[i]);
}

StepOutcome CartPoleEnv::Step(const void* action, float* obs) {
  using namespace cartpole;
  int64_t a = *static_cast<const int64_t*>(action);
  double x = s_[0], x_dot = s_[1], theta = s_[2], theta_dot = s_[3];
  double force = a == 1 ? kForceMag : -kForceMag;
  double costheta = std::cos(theta), sintheta = std::sin(theta);
  double temp = (force + kPoleMassLength * (theta_dot * theta_dot) * sintheta) / kTotalMass;
  double thetaacc = (kGravity * sintheta - costheta * temp) /
                    (kLength * (4.0 / 3.0 - kMassPole * (costheta * costheta) / kTotalMass));
  double xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
  // Explicit Euler, Gymnasium's default integrator.
  s_[0] = x + kTau * x_dot;
  s_[1] = x_dot + kTau * xacc;
  s_[2] = theta + kTau * theta_dot;
  s_[3] = theta_dot + kTau * thetaacc;
  Observe(obs);
  bool terminated = s_[0] < -kXThreshold || s_[0] > kXThreshold || s_[2] < -kThetaThreshold ||
                    s_[2] > kThetaThreshold;
  // The step that terminates still earns 1 (Gymnasium's default reward).
  return {1.0, terminated};
}

// ---------------------------------------------------------------- Pendulum-v1

namespace pendulum {
constexpr double kMaxSpeed = 8, kMaxTorque = 2.0, kDt = 0.05, kG = 10.0, kM = 1.0, kL = 1.0;
}

PendulumEnv::PendulumEnv() {
  using namespace pendulum;
  spec_.id = "Pendulum-v1";
  spec_.observation = Space::Box({3}, {-1, -1, -kMaxSpeed}, {1, 1, kMaxSpeed});
  spec_.action = Space::Box({1}, {-kMaxTorque}, {kMaxTorque});
  spec_.max_episode_steps = 200;
}

void PendulumEnv::Reset(std::optional<uint64_t> seed, float* obs) {
  if (seed) rng_.Seed(*seed);
  th_ = rng_.Uniform(-kPi, kPi);
  thdot_ = rng_.Uniform(-1.0, 1.0);
  Observe(obs);
}

void PendulumEnv::SetState(const std::vector<double>& state) {
  th_ = state[0];
  thdot_ = state[1];
}

void PendulumEnv::Observe(float* obs) const {
  obs[0] = static_cast<float>(std::cos(th_));
  obs[1] = static_cast<float>(std::sin(th_));
  obs[2] = static_cast<float>(thdot_);
}

StepOutcome PendulumEnv::Step(const void* action, float* obs) {
  using namespace pendulum;
  // The action stays float32, as in Gymnasium; NumPy 2 keeps float32 when a
  // Python float multiplies it, so those products are float32 here too.
  float u = *static_cast<const float*>(action);
  u = std::fmin(std::fmax(u, static_cast<float>(-kMaxTorque)), static_cast<float>(kMaxTorque));
  double norm = std::fmod(th_ + kPi, 2 * kPi);
  if (norm < 0) norm += 2 * kPi;
  norm -= kPi;
  float u_cost = 0.001f * (u * u);
  double costs = norm * norm + 0.1 * (thdot_ * thdot_) + static_cast<double>(u_cost);
  float u_term = 3.0f / static_cast<float>(kM * kL * kL) * u;
  double newthdot =
      thdot_ + (3 * kG / (2 * kL) * std::sin(th_) + static_cast<double>(u_term)) * kDt;
  newthdot = std::fmin(std::fmax(newthdot, -kMaxSpeed), kMaxSpeed);
  th_ = th_ + newthdot * kDt;
  thdot_ = newthdot;
  Observe(obs);
  return {-costs, false};
}

// ----------------------------------------------------------------- Acrobot-v1

namespace acrobot {
constexpr double kDt = 0.2;
constexpr double kL1 = 1.0, kM1 = 1.0, kM2 = 1.0, kLc1 = 0.5, kLc2 = 0.5, kMoi = 1.0;
constexpr double kMaxVel1 = 4 * kPi, kMaxVel2 = 9 * kPi;
constexpr double kTorque[3] = {-1.0, 0.0, 1.0};

// "book" dynamics, in Gymnasium's operation order.
void Derivs(const double* s, double a, double* out) {
  const double m1 = kM1, m2 = kM2, l1 = kL1, lc1 = kLc1, lc2 = kLc2, I1 = kMoi, I2 = kMoi;
  const double g = 9.8;
  double theta1 = s[0], theta2 = s[1], dtheta1 = s[2], dtheta2 = s[3];
  double d1 =
      m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * std::cos(theta2)) + I1 + I2;
  double d2 = m2 * ((lc2 * lc2) + l1 * lc2 * std::cos(theta2)) + I2;
  double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - kPi / 2.0);
  double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * std::sin(theta2) -
                2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * std::sin(theta2) +
                (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - kPi / 2) + phi2;
  double ddtheta2 =
      (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * std::sin(theta2) - phi2) /
      (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
  double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
  out[0] = dtheta1;
  out[1] = dtheta2;
  out[2] = ddtheta1;
  out[3] = ddtheta2;
}

double Wrap(double x, double m, double M) {
  double diff = M - m;
  while (x > M) x = x - diff;
  while (x < m) x = x + diff;
  return x;
}

double Bound(double x, double m, double M) { return std::fmin(std::fmax(x, m), M); }
}  // namespace acrobot

AcrobotEnv::AcrobotEnv() {
  using namespace acrobot;
  spec_.id = "Acrobot-v1";
  double v1 = static_cast<float>(kMaxVel1), v2 = static_cast<float>(kMaxVel2);
  spec_.observation = Space::Box({6}, {-1, -1, -1, -1, -v1, -v2}, {1, 1, 1, 1, v1, v2});
  spec_.action = Space::Discrete(3);
  spec_.max_episode_steps = 500;
}

void AcrobotEnv::Reset(std::optional<uint64_t> seed, float* obs) {
  if (seed) rng_.Seed(*seed);
  // Gymnasium draws the start state in float64 and stores it as float32.
  for (double& v : s_) v = static_cast<float>(rng_.Uniform(-0.1, 0.1));
  Observe(obs);
}

void AcrobotEnv::SetState(const std::vector<double>& state) {
  for (int i = 0; i < 4; ++i) s_[i] = state[i];
}

void AcrobotEnv::Observe(float* obs) const {
  obs[0] = static_cast<float>(std::cos(s_[0]));
  obs[1] = static_cast<float>(std::sin(s_[0]));
  obs[2] = static_cast<float>(std::cos(s_[1]));
  obs[3] = static_cast<float>(std::sin(s_[1]));
  obs[4] = static_cast<float>(s_[2]);
  obs[5] = static_cast<float>(s_[3]);
}

StepOutcome AcrobotEnv::Step(const void* action, float* obs) {
  using namespace acrobot;
  int64_t a = *static_cast<const int64_t*>(action);
  double torque = kTorque[a];
  // One classic RK4 step over [0, dt], as gymnasium.envs.classic_control.acrobot.rk4.
  const double dt = kDt, dt2 = kDt / 2.0;
  double y0[4], k1[4], k2[4], k3[4], k4[4], tmp[4];
  for (int i = 0; i < 4; ++i) y0[i] = s_[i];
  Derivs(y0, torque, k1);
  for (int i = 0; i < 4; ++i) tmp[i] = y0[i] + dt2 * k1[i];
  Derivs(tmp, torque, k2);
  for (int i = 0; i < 4; ++i) tmp[i] = y0[i] + dt2 * k2[i];
  Derivs(tmp, torque, k3);
  for (int i = 0; i < 4; ++i) tmp[i] = y0[i] + dt * k3[i];
  Derivs(tmp, torque, k4);
  double ns[4];
  for (int i = 0; i < 4; ++i) ns[i] = y0[i] + dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
  s_[0] = Wrap(ns[0], -kPi, kPi);
  s_[1] = Wrap(ns[1], -kPi, kPi);
  s_[2] = Bound(ns[2], -kMaxVel1, kMaxVel1);
  s_[3] = Bound(ns[3], -kMaxVel2, kMaxVel2);
  Observe(obs);
  bool terminated = -std::cos(s_[0]) - std::cos(s_[1] + s_[0]) > 1.0;
  return {terminated ? 0.0 : -1.0, terminated};
}

}  // namespace rlforge::sim
