// Generalised advantage estimation over [T, N] rollouts with next-step autoreset.
//
// rewards, values, last_values, terminated, truncated, valid -> advantages, returns
//
// Step t of env n is a real transition when valid[t, n] (an autoreset step,
// whose action the env ignored, is not). values[t, n] = V(obs_t); the value
// of the observation after step t is values[t + 1, n] (or last_values[n] at
// t = T - 1); after a truncation that observation is the episode's final one,
// so truncated episodes bootstrap from it, while terminated ones do not:
//   delta_t = r_t + gamma * V(obs_t+1) * (1 - terminated_t) - V(obs_t)
//   A_t     = delta_t + gamma * lambda * (1 - done_t) * A_t+1,  done = term | trunc
// Invalid steps get A = 0 and return 0. Plain C++: the controller runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rlforge {

struct GaeInput {
  int64_t T = 0, N = 0;
  const float* rewards = nullptr;       // [T, N]
  const float* values = nullptr;        // [T, N]
  const float* last_values = nullptr;   // [N]
  const uint8_t* terminated = nullptr;  // [T, N]
  const uint8_t* truncated = nullptr;   // [T, N]
  const uint8_t* valid = nullptr;       // [T, N]
};

struct GaeOutput {
  std::vector<float> advantages;  // [T, N]
  std::vector<float> returns;     // [T, N] = advantages + values
};

GaeOutput ComputeGae(const GaeInput& in, double gamma, double lambda);

}  // namespace rlforge
