#include "trainer/token_ppo.h"

#include <gtest/gtest.h>

#include "trainer/gae.h"

namespace rlforge {
namespace {

torch::Tensor D(std::initializer_list<double> v, int64_t rows = 1) {
  return torch::tensor(std::vector<double>(v), torch::kFloat64).reshape({rows, -1});
}

// Row 0 starts after a prompt position and ends before padding; row 1 fills T.
TEST(TokenPpoTest, TokenRewardsPutTheScoreOnTheLastResponseToken) {
  auto mask = D({0, 1, 1, 0, 1, 1, 1, 1}, 2);
  auto kl = torch::full({2, 4}, 0.1, torch::kFloat64);
  auto r = TokenLevelRewards(D({1, 2}).reshape({2}), mask, kl, 0.5).value();
  auto expect = D({0, -0.05, 0.95, 0, -0.05, -0.05, -0.05, 1.95}, 2);
  EXPECT_TRUE(torch::allclose(r, expect, 1e-12, 1e-12)) << r;
  auto no_kl = TokenLevelRewards(D({1, 2}).reshape({2}), mask, torch::Tensor(), 0).value();
  EXPECT_TRUE(torch::allclose(no_kl, D({0, 0, 1, 0, 0, 0, 0, 2}, 2)));
}

TEST(TokenPpoTest, RowWithoutResponseIsAnError) {
  auto r = TokenLevelRewards(D({1, 2}).reshape({2}), D({1, 1, 0, 0}, 2), torch::Tensor(), 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("row 1"), std::string::npos);
}

// mask [1, 1, 1, 0], r [0, 0, 1, 0], V [0.5, 0.6, 0.7, 9], gamma 0.9, lambda 0.8:
//   t=2: delta = 1 - 0.7 = 0.3                         A = 0.3,     R = 1.0
//   t=1: delta = 0.9 * 0.7 - 0.6 = 0.03; + 0.72 * 0.3  A = 0.246,   R = 0.846
//   t=0: delta = 0.9 * 0.6 - 0.5 = 0.04; + 0.72 * A1   A = 0.21712, R = 0.71712
TEST(TokenPpoTest, GaeMatchesHandComputation) {
  TokenGaeOptions opt{0.9, 0.8, false};
  auto g = TokenGae(D({0, 0, 1, 0}), D({0.5, 0.6, 0.7, 9}), D({1, 1, 1, 0}), opt).value();
  EXPECT_TRUE(torch::allclose(g.advantages, D({0.21712, 0.246, 0.3, 0}), 1e-12, 1e-12))
      << g.advantages;
  EXPECT_TRUE(torch::allclose(g.returns, D({0.71712, 0.846, 1.0, 0}), 1e-12, 1e-12));
}

// A masked-out position (a tool's output inside the response) is skipped by the recursion.
TEST(TokenPpoTest, GaeSkipsMaskedHoles) {
  TokenGaeOptions opt{0.9, 0.8, false};
  auto g = TokenGae(D({0, 50, 1}), D({0.5, 100, 0.7}), D({1, 0, 1}), opt).value();
  EXPECT_TRUE(torch::allclose(g.advantages, D({0.13 + 0.72 * 0.3, 0, 0.3}), 1e-12, 1e-12))
      << g.advantages;
}

// One response is one terminated episode of trainer/gae.h's [T, N] layout.
TEST(TokenPpoTest, GaeAgreesWithControlGaeOnTerminatedEpisodes) {
  torch::manual_seed(3);
  const int64_t B = 3, T = 6;
  auto rewards = torch::randn({B, T}, torch::kFloat64);
  auto values = torch::randn({B, T}, torch::kFloat64);
  auto mask = torch::ones({B, T}, torch::kFloat64);
  mask[1].narrow(0, 4, 2).fill_(0);  // a shorter response
  TokenGaeOptions opt{0.97, 0.9, false};
  auto g = TokenGae(rewards, values, mask, opt).value();
  for (int64_t b = 0; b < B; ++b) {
    int64_t len = mask[b].sum().item<int64_t>();
    std::vector<float> r(len), v(len);
    std::vector<uint8_t> term(len, 0), trunc(len, 0), valid(len, 1);
    for (int64_t t = 0; t < len; ++t) {
      r[t] = static_cast<float>(rewards[b][t].item<double>());
      v[t] = static_cast<float>(values[b][t].item<double>());
    }
    term[len - 1] = 1;
    float last = 0;
    GaeOutput ref =
        ComputeGae({len, 1, r.data(), v.data(), &last, term.data(), trunc.data(), valid.data()},
                   opt.gamma, opt.lambda);
    // Same recursion; ComputeGae reads float32 inputs, hence the tolerance.
    for (int64_t t = 0; t < len; ++t) {
      EXPECT_NEAR(g.advantages[b][t].item<double>(), ref.advantages[t], 1e-5) << b << "," << t;
      EXPECT_NEAR(g.returns[b][t].item<double>(), ref.returns[t], 1e-5);
    }
  }
}

TEST(TokenPpoTest, WhitenedAdvantagesHaveZeroMeanUnitStdOnTheMask) {
  torch::manual_seed(1);
  auto mask = D({1, 1, 1, 0, 1, 1, 0, 0}, 2);
  auto g = TokenGae(torch::randn({2, 4}, torch::kFloat64), torch::randn({2, 4}, torch::kFloat64),
                    mask, TokenGaeOptions{})
               .value();
  auto on = g.advantages.masked_select(mask > 0);
  EXPECT_NEAR(on.mean().item<double>(), 0, 1e-9);
  EXPECT_NEAR(on.std().item<double>(), 1, 1e-6);
  EXPECT_EQ(g.advantages[0][3].item<double>(), 0.0);
}

// new [1, 2], old [0, 3], returns [1.5, 1], clip 0.5 (the case of ppo_loss_test):
//   unclipped errors [0.25, 1], clipped [1, 2.25] -> 0.5 * 1.625; both tokens clipped.
TEST(TokenPpoTest, ValueLossClippedAndUnclipped) {
  auto v = D({1, 2}).requires_grad_(true), old = D({0, 3}), ret = D({1.5, 1}), m = D({1, 1});
  auto l = ComputeTokenValueLoss(v, old, ret, m, 0.5).value();
  EXPECT_NEAR(l.loss.item<double>(), 0.8125, 1e-12);
  EXPECT_NEAR(l.clipfrac, 1.0, 1e-12);
  EXPECT_NEAR(ComputeTokenValueLoss(v, old, ret, m, 0).value().loss.item<double>(), 0.3125, 1e-12);
  auto masked = ComputeTokenValueLoss(v, old, ret, D({1, 0}), 0.5).value();
  EXPECT_NEAR(masked.loss.item<double>(), 0.5, 1e-12);
  masked.loss.backward();  // clipped side active and V - V_old > clip: no gradient
  EXPECT_EQ(v.grad()[0][0].item<double>(), 0.0);
}

}  // namespace
}  // namespace rlforge
