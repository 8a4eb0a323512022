#include "trainer/gae.h"

namespace rlforge {

GaeOutput ComputeGae(const GaeInput& in, double gamma, double lambda) {
  const int64_t T = in.T, N = in.N;
  GaeOutput out;
  out.advantages.assign(static_cast<size_t>(T * N), 0.f);
  out.returns.assign(static_cast<size_t>(T * N), 0.f);
  for (int64_t n = 0; n < N; ++n) {
    double next_adv = 0;
    for (int64_t t = T - 1; t >= 0; --t) {
      int64_t i = t * N + n;
      if (!in.valid[i]) {
        next_adv = 0;
        continue;
      }
      double next_value = t + 1 < T ? in.values[i + N] : in.last_values[n];
      bool term = in.terminated[i] != 0;
      bool done = term || in.truncated[i] != 0;
      double delta = in.rewards[i] + gamma * next_value * (term ? 0.0 : 1.0) - in.values[i];
      double adv = delta + gamma * lambda * (done ? 0.0 : 1.0) * next_adv;
      out.advantages[i] = static_cast<float>(adv);
      out.returns[i] = static_cast<float>(adv + in.values[i]);
      next_adv = adv;
    }
  }
  return out;
}

}  // namespace rlforge
