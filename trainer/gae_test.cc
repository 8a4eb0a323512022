#include "trainer/gae.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

struct Case {
  std::vector<float> rewards = {1, 2, 3}, values = {0.5f, 1.0f, 1.5f}, last = {2.0f};
  std::vector<uint8_t> term = {0, 0, 0}, trunc = {0, 0, 0}, valid = {1, 1, 1};
  GaeOutput Run() {
    GaeInput in;
    in.T = 3;
    in.N = 1;
    in.rewards = rewards.data();
    in.values = values.data();
    in.last_values = last.data();
    in.terminated = term.data();
    in.truncated = trunc.data();
    in.valid = valid.data();
    return ComputeGae(in, 0.9, 0.5);
  }
};

// Hand computation, gamma 0.9, lambda 0.5:
//   delta2 = 3 + 0.9*2.0 - 1.5 = 3.3            A2 = 3.3
//   delta1 = 2 + 0.9*1.5 - 1.0 = 2.35           A1 = 2.35 + 0.45*3.3 = 3.835
//   delta0 = 1 + 0.9*1.0 - 0.5 = 1.4            A0 = 1.4 + 0.45*3.835 = 3.12575
TEST(GaeTest, NoEpisodeEndBootstrapsFromLastValue) {
  GaeOutput o = Case().Run();
  EXPECT_NEAR(o.advantages[2], 3.3, 1e-6);
  EXPECT_NEAR(o.advantages[1], 3.835, 1e-6);
  EXPECT_NEAR(o.advantages[0], 3.12575, 1e-6);
  EXPECT_NEAR(o.returns[0], 3.12575 + 0.5, 1e-6);
}

// Truncated at t=1: bootstrap from V(final obs) = values[2] (the autoreset
// step's value), stop the recursion there, and ignore the invalid step 2.
TEST(GaeTest, TruncationBootstrapsFromTheFinalObservation) {
  Case c;
  c.trunc = {0, 1, 0};
  c.valid = {1, 1, 0};
  GaeOutput o = c.Run();
  EXPECT_EQ(o.advantages[2], 0.f);
  EXPECT_EQ(o.returns[2], 0.f);
  EXPECT_NEAR(o.advantages[1], 2.35, 1e-6);
  EXPECT_NEAR(o.advantages[0], 1.4 + 0.45 * 2.35, 1e-6);
}

// Terminated at t=1: no bootstrap at all.
TEST(GaeTest, TerminationDoesNotBootstrap) {
  Case c;
  c.term = {0, 1, 0};
  c.valid = {1, 1, 0};
  GaeOutput o = c.Run();
  EXPECT_NEAR(o.advantages[1], 1.0, 1e-6);
  EXPECT_NEAR(o.advantages[0], 1.4 + 0.45 * 1.0, 1e-6);
}

TEST(GaeTest, EnvsAreIndependentColumns) {
  // Two envs interleaved [T, N]: env 1 terminates at t=0, env 0 runs on.
  std::vector<float> rewards = {1, 5, 2, 0}, values = {0.5f, 1, 1, 0}, last = {1.5f, 0};
  std::vector<uint8_t> term = {0, 1, 0, 0}, trunc = {0, 0, 0, 0}, valid = {1, 1, 1, 0};
  GaeInput in{2,           2,           rewards.data(), values.data(),
              last.data(), term.data(), trunc.data(),   valid.data()};
  GaeOutput o = ComputeGae(in, 1.0, 1.0);
  EXPECT_NEAR(o.advantages[1], 5 - 1, 1e-6);                // env 1, t=0
  EXPECT_NEAR(o.advantages[2], 2 + 1.5 - 1, 1e-6);          // env 0, t=1
  EXPECT_NEAR(o.advantages[0], (1 + 1 - 0.5) + 2.5, 1e-6);  // env 0, t=0
  EXPECT_EQ(o.advantages[3], 0.f);
}

}  // namespace
}  // namespace rlforge
